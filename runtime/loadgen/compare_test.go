package loadgen

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCompare: two reports of one workload side by side, ratios over the
// first, the lower bound of a sweep that never broke, and a note when the
// workloads differ.
func TestCompare(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int) *int { return &v }
	mk := func(goodput float64, stable int, lower bool) *Report {
		r := &Report{Schema: Schema, Name: "demo", Model: "m", Status: "pass", GoodputTokS: f(goodput), MaxStableConcurrency: i(stable),
			MaxStableIsLowerBound: lower, Verdicts: []Verdict{{Status: "pass"}, {Status: "block"}},
			Sweep: &SweepResult{Points: []SweepPoint{{Load: float64(stable), Stable: true, GoodputTokS: f(goodput * 2)}}}}
		r.Overall.TTFTMs.P99 = f(100)
		r.Versions.Target = &TargetInfo{URL: "http://x", Server: "llama.cpp"}
		return r
	}
	a, b := mk(100, 8, false), mk(150, 16, true)
	c, err := Compare([]string{"ours", "theirs"}, []string{"a", "b"}, []*Report{a, b})
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	if err := c.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"150.0 tok/s (1.50×)", "≥ 16", "300.0 tok/s (1.50×)", "pass 1, retest 0, block 1"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("no %q in\n%s", want, md.String())
		}
	}
	if len(c.Notes) != 0 {
		t.Errorf("notes %v", c.Notes)
	}
	b.Workload.Class = "batch"
	if c, _ = Compare([]string{"ours", "theirs"}, []string{"a", "b"}, []*Report{a, b}); len(c.Notes) != 1 || !strings.Contains(c.Notes[0], "not comparable") {
		t.Errorf("different workloads: notes %v", c.Notes)
	}
	if _, err := Compare([]string{"one"}, []string{"a"}, []*Report{a}); err == nil {
		t.Error("one report compared")
	}
	dir := t.TempDir()
	if err := c.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadReport(filepath.Join(dir, "compare.json")); err == nil {
		t.Error("a comparison read as a report")
	}
}
