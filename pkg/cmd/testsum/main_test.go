package main

import (
	"regexp"
	"strings"
	"testing"
)

// A run of three tests in one package: one passes, one fails, one skips
// for a missing tool. The failed test's output is shown, the passing one's
// is not, the skip is grouped under its reason, and -fail-skips turns that
// skip into a failure.
const stream = `{"Action":"run","Package":"m/p","Test":"TestA"}
{"Action":"output","Package":"m/p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"m/p","Test":"TestA","Output":"    a_test.go:3: quiet\n"}
{"Action":"pass","Package":"m/p","Test":"TestA"}
{"Action":"output","Package":"m/p","Test":"TestB","Output":"    b_test.go:9: got 1, want 2\n"}
{"Action":"output","Package":"m/p","Test":"TestB","Output":"--- FAIL: TestB (0.00s)\n"}
{"Action":"fail","Package":"m/p","Test":"TestB"}
{"Action":"output","Package":"m/p","Test":"TestC","Output":"    c_test.go:5: mosquitto is not installed: apt-get install mosquitto\n"}
{"Action":"output","Package":"m/p","Test":"TestC","Output":"--- SKIP: TestC (0.00s)\n"}
{"Action":"skip","Package":"m/p","Test":"TestC"}
{"Action":"output","Package":"m/p","Output":"FAIL\n"}
{"Action":"output","Package":"m/p","Output":"FAIL\tm/p\t0.01s\n"}
{"Action":"fail","Package":"m/p"}
`

func TestSummary(t *testing.T) {
	var out strings.Builder
	s, err := summarise(strings.NewReader(stream), &out)
	if err != nil {
		t.Fatal(err)
	}
	if s.passed != 1 || s.failed != 1 || len(s.skips) != 1 || len(s.failedPkgs) != 1 {
		t.Fatalf("counts: %+v", s)
	}
	if k := s.skips[0]; k.reason != "mosquitto is not installed: apt-get install mosquitto" {
		t.Errorf("skip reason %q", k.reason)
	}
	text := out.String()
	if strings.Contains(text, "quiet") || !strings.Contains(text, "got 1, want 2") || !strings.Contains(text, "FAIL\tm/p") {
		t.Errorf("output as go test prints it without -v:\n%s", text)
	}
	out.Reset()
	if !s.report(&out, nil) {
		t.Error("a failed test did not fail the run")
	}
	if !strings.HasSuffix(out.String(), "\n1 passed, 1 failed, 1 skipped\n") || !strings.Contains(out.String(), "p.TestC") {
		t.Errorf("report:\n%s", out.String())
	}
	// Without the failure, only the forbidden skip fails the run.
	s.failed, s.failedPkgs = 0, nil
	if s.report(&strings.Builder{}, nil) {
		t.Error("a skip failed the run without -fail-skips")
	}
	if !s.report(&out, regexp.MustCompile(`apt-get install`)) {
		t.Error("a skip for a tool named by -fail-skips did not fail the run")
	}
}
