package loadgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// A Comparison puts reports of the same workload side by side: several
// servers (edgeinfer serve and llama-server, say) measured by the same
// profile and SLOs, or rounds of one. Each run is a column; the headline
// figures (goodput at SLO, max stable concurrency, latency quantiles,
// verdicts) are rows, and every column after the first carries its ratio
// to the first where a ratio means something.
type Comparison struct {
	Schema string       `json:"schema"`
	Runs   []CompareRun `json:"runs"`
	// Notes say what makes the columns not comparable (different
	// workloads or SLOs, different machines).
	Notes []string `json:"notes"`
}

// CompareRun is one report's column.
type CompareRun struct {
	Label  string `json:"label"`
	Dir    string `json:"dir"`
	Server string `json:"server"`
	Model  string `json:"model"`
	Status string `json:"status"`
	// Verdicts counts the report's verdicts by status (pass, retest,
	// block).
	Verdicts             map[string]int `json:"verdicts"`
	GoodputTokS          *float64       `json:"goodput_tok_s"`
	ThroughputTokS       *float64       `json:"throughput_tok_s"`
	SLOAttainment        *float64       `json:"slo_attainment"`
	MaxStableConcurrency *int           `json:"max_stable_concurrency"`
	MaxStableLowerBound  bool           `json:"max_stable_is_lower_bound"`
	// SweepGoodputTokS is the goodput of the sweep's trial at the max
	// stable concurrency: goodput at the highest load the SLOs held.
	SweepGoodputTokS *float64 `json:"sweep_goodput_tok_s"`
	TTFTP50          *float64 `json:"ttft_ms_p50"`
	TTFTP99          *float64 `json:"ttft_ms_p99"`
	ITLP50           *float64 `json:"itl_ms_p50"`
	ITLP99           *float64 `json:"itl_ms_p99"`
	Requests         int      `json:"requests"`
	CPU              string   `json:"cpu_model"`
}

// CompareSchema versions the comparison's JSON.
const CompareSchema = "edgeinfer.bench-compare/1"

// ReadReport reads a report.json (or the directory holding one).
func ReadReport(path string) (*Report, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, "report.json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("loadgen: %s: not a report: %w", path, err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("loadgen: %s: schema %q, want a bench report (%s)", path, r.Schema, Schema)
	}
	return &r, nil
}

// Compare builds the comparison of reps, labelled by labels (one each).
func Compare(labels, dirs []string, reps []*Report) (*Comparison, error) {
	if len(reps) < 2 || len(labels) != len(reps) || len(dirs) != len(reps) {
		return nil, errors.New("loadgen: compare needs two reports or more, one label each")
	}
	c := &Comparison{Schema: CompareSchema}
	first := reps[0]
	for i, r := range reps {
		run := CompareRun{Label: labels[i], Dir: dirs[i], Model: r.Model, Status: r.Status, Verdicts: map[string]int{},
			GoodputTokS: r.GoodputTokS, ThroughputTokS: r.Overall.ThroughputTokS, SLOAttainment: r.SLOAttainment,
			MaxStableConcurrency: r.MaxStableConcurrency, MaxStableLowerBound: r.MaxStableIsLowerBound,
			TTFTP50: r.Overall.TTFTMs.P50, TTFTP99: r.Overall.TTFTMs.P99, ITLP50: r.Overall.ITLMs.P50, ITLP99: r.Overall.ITLMs.P99,
			Requests: r.Overall.Requests, CPU: r.Versions.CPU, Server: "in-process engine"}
		if t := r.Versions.Target; t != nil {
			run.Server = t.Server
			if run.Server == "" {
				run.Server = t.URL
			}
			if t.OwnedBy != "" {
				run.Server += " (owned_by " + t.OwnedBy + ")"
			}
		}
		for _, v := range r.Verdicts {
			run.Verdicts[v.Status]++
		}
		run.SweepGoodputTokS = sweepGoodput(r)
		c.Runs = append(c.Runs, run)
		if i == 0 {
			continue
		}
		if !bytes.Equal(workloadKey(first), workloadKey(r)) {
			c.Notes = append(c.Notes, fmt.Sprintf("%s ran a different workload or SLO than %s (input, output, class, SLO, phases or thresholds differ): the columns are not comparable", labels[i], labels[0]))
		}
		if r.Versions.CPU != first.Versions.CPU || r.Versions.Cores != first.Versions.Cores {
			c.Notes = append(c.Notes, fmt.Sprintf("%s ran on %s (%d cores), %s on %s (%d cores)", labels[i], r.Versions.CPU, r.Versions.Cores, labels[0], first.Versions.CPU, first.Versions.Cores))
		}
	}
	return c, nil
}

// sweepGoodput is the goodput of the sweep trial at the max stable load.
func sweepGoodput(r *Report) *float64 {
	if r.Sweep == nil || r.MaxStableConcurrency == nil {
		return nil
	}
	var best *float64
	for _, p := range r.Sweep.Points {
		if p.Stable && int(p.Load) == *r.MaxStableConcurrency {
			best = p.GoodputTokS
		}
	}
	return best
}

// workloadKey is what must match for two reports to be compared.
func workloadKey(r *Report) []byte {
	b, _ := json.Marshal(struct {
		W          Workload
		Phases     []Phase
		Thresholds []Threshold
	}{r.Workload, r.Spec.Phases, r.Spec.Thresholds})
	return b
}

// WriteMarkdown writes the comparison as a table, runs as columns.
func (c *Comparison) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("# Bench comparison\n\n")
	head := []string{""}
	for _, r := range c.Runs {
		head = append(head, r.Label)
	}
	rows := [][]string{head}
	// text rows say what each column is; figure rows add each column's
	// ratio to the first
	text := func(name string, f func(CompareRun) string) {
		cells := []string{name}
		for _, r := range c.Runs {
			cells = append(cells, f(r))
		}
		rows = append(rows, cells)
	}
	figure := func(name, format string, f func(CompareRun) *float64) {
		cells := []string{name}
		base := f(c.Runs[0])
		for i, r := range c.Runs {
			v := f(r)
			if v == nil {
				cells = append(cells, "—")
				continue
			}
			cell := fmt.Sprintf(format, *v)
			if i > 0 && base != nil && *base != 0 {
				cell += fmt.Sprintf(" (%.2f×)", *v / *base)
			}
			cells = append(cells, cell)
		}
		rows = append(rows, cells)
	}
	text("server", func(r CompareRun) string { return r.Server })
	text("model", func(r CompareRun) string { return r.Model })
	text("verdict", func(r CompareRun) string {
		return fmt.Sprintf("%s (pass %d, retest %d, block %d)", r.Status, r.Verdicts["pass"], r.Verdicts["retest"], r.Verdicts["block"])
	})
	figure("goodput at SLO (whole run)", "%.1f tok/s", func(r CompareRun) *float64 { return r.GoodputTokS })
	figure("goodput at the max stable concurrency", "%.1f tok/s", func(r CompareRun) *float64 { return r.SweepGoodputTokS })
	text("max stable concurrency", func(r CompareRun) string {
		switch {
		case r.MaxStableConcurrency == nil:
			return "none stable / not swept"
		case r.MaxStableLowerBound:
			return fmt.Sprintf("≥ %d", *r.MaxStableConcurrency)
		}
		return fmt.Sprint(*r.MaxStableConcurrency)
	})
	figure("SLO attainment", "%.3f", func(r CompareRun) *float64 { return r.SLOAttainment })
	figure("throughput", "%.1f tok/s", func(r CompareRun) *float64 { return r.ThroughputTokS })
	figure("TTFT p50", "%.1f ms", func(r CompareRun) *float64 { return r.TTFTP50 })
	figure("TTFT p99", "%.1f ms", func(r CompareRun) *float64 { return r.TTFTP99 })
	figure("ITL p50", "%.1f ms", func(r CompareRun) *float64 { return r.ITLP50 })
	figure("ITL p99", "%.1f ms", func(r CompareRun) *float64 { return r.ITLP99 })
	text("requests", func(r CompareRun) string { return fmt.Sprint(r.Requests) })
	text("CPU", func(r CompareRun) string { return r.CPU })
	writeMDTable(&b, rows)
	b.WriteString("\nRatios are each column over the first.\n")
	for _, n := range c.Notes {
		b.WriteString("\n- " + n)
	}
	if len(c.Notes) > 0 {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteDir writes compare.json and compare.md into dir.
func (c *Comparison) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "compare.json"), j, 0o644); err != nil {
		return err
	}
	var md strings.Builder
	if err := c.WriteMarkdown(&md); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "compare.md"), []byte(md.String()), 0o644)
}
