package fleet_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
)

// TestOnMochi runs this package's tests again against mochi-mqtt, a broker
// written apart from mosquitto (pkg/link/mosquittotest): rollbacks and
// rollouts of a few devices, the leadership claim, partitions, bulk data
// over HTTPS and the request server must not depend on one broker's ways. A test
// that skips there fails this one: mochi runs them all or says why not.
// The scale and throughput measurements are left out: they read
// mosquitto's $SYS counters and bridge brokers. The rollout tests run
// here too; they were left out while a rollout on mochi sometimes stalled
// with fleet serve deaf to one kind of request, which was the link taking
// a shared subscription's 0x91 for a grant (SERVING.md).
func TestOnMochi(t *testing.T) {
	if mosquittotest.Mochi() {
		t.Skip("this run is against mochi-mqtt already (EDGEINFER_TEST_BROKER=mochi)")
	}
	if testing.Short() {
		t.Skip("-short: the package's tests against a second broker take minutes")
	}
	if mosquittotest.Binary() == "" {
		t.Skip("mosquitto is not installed: apt-get install mosquitto mosquitto-clients (.ci/run installs it); without it the package's broker tests skip, and so does their run against mochi-mqtt")
	}
	cmd := exec.Command(os.Args[0], "-test.v", "-test.count=1", "-test.timeout=20m",
		"-test.skip", "^(TestOnMochi|TestScaleSim|TestScaleSimChild|TestChunkThroughput)$")
	cmd.Env = append(os.Environ(), "EDGEINFER_TEST_BROKER=mochi")
	out, err := cmd.CombinedOutput()
	var passed, skipped, failed []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(strings.TrimSpace(sc.Text()))
		if len(f) < 3 || f[0] != "---" {
			continue
		}
		switch f[1] {
		case "PASS:":
			passed = append(passed, f[2])
		case "SKIP:":
			skipped = append(skipped, f[2])
		case "FAIL:":
			failed = append(failed, f[2])
		}
	}
	if err != nil || len(failed) > 0 || len(skipped) > 0 || len(passed) == 0 {
		t.Fatalf("against mochi-mqtt: %v; failed %v, skipped %v\n%s", err, failed, skipped, out)
	}
	t.Logf("against mochi-mqtt: %d tests and subtests passed: %s", len(passed), strings.Join(passed, " "))
}
