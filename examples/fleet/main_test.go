package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// TestDemo runs the whole story on a small fleet: the good release goes
// out wave by wave, the broken one fails its health check on the
// canaries, the rollout halts, and every kiosk ends on release 1.
func TestDemo(t *testing.T) {
	orttest.Need(t)
	if mosquittotest.Binary() == "" {
		t.Skip("mosquitto is not installed: apt-get install mosquitto (.ci/run installs it)")
	}
	const n = 4
	var out bytes.Buffer
	if err := Run(t.Context(), &out, Config{Devices: n, Dir: t.TempDir()}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	t.Log("\n" + s)
	for _, want := range []string{
		"rollout r1 wave 1/3 (25 %): 1 of 4 kiosks assigned tiny@1",
		"rollout r1 wave 2/3 (50 %): 2 of 4 kiosks assigned tiny@1",
		"rollout r1 wave 3/3 (100 %): 4 of 4 kiosks assigned tiny@1",
		"rollout r1 completed: 4 of 4 kiosks assigned",
		"rollout r2 wave 1/3 (25 %): 1 of 4 kiosks assigned tiny@2",
		"rollout r2 HALTED at wave 1/3 with 1 of 4 assigned",
		"every one of the 4 kiosks runs tiny@1",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the timeline lacks %q", want)
		}
	}
	// The waves came in order, and the halt after the canary's failure.
	order := []string{"r1 wave 1/3", "r1 wave 2/3", "r1 wave 3/3", "r1 completed", "r2 wave 1/3", "health check FAILED on 2, rolled back: runs tiny@1", "r2 HALTED"}
	at := 0
	for _, o := range order {
		i := strings.Index(s[at:], o)
		if i < 0 {
			t.Fatalf("%q missing or out of order in the timeline", o)
		}
		at += i
	}
	if strings.Contains(s, "r2 wave 2/3") {
		t.Error("the broken release reached a second wave")
	}
	// The final table: every kiosk active on 1, exactly the one canary failed.
	rows := regexp.MustCompile(`(?m)^(dev-\d+)\s+kiosk-sim\s+online\s+(\S+)\s+\S+\s+(\S+)`).FindAllStringSubmatch(s, -1)
	if len(rows) != n {
		t.Fatalf("%d device rows in the status table, want %d", len(rows), n)
	}
	failed := 0
	for _, r := range rows {
		if r[2] != "1" {
			t.Errorf("%s ends on %q, want 1", r[1], r[2])
		}
		if r[3] == "failed" {
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("%d kiosks failed the check of 2, want the 1 canary", failed)
	}
}

func TestBadConfig(t *testing.T) {
	if err := Run(t.Context(), &bytes.Buffer{}, Config{Devices: -1}); err == nil || !strings.Contains(err.Error(), "1 to 500") {
		t.Fatalf("err = %v", err)
	}
	if err := runMain(t.Context(), &bytes.Buffer{}, []string{"-n", "x"}); err == nil {
		t.Fatal("bad -n accepted")
	}
}
