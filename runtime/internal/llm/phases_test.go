package llm

import "testing"

// TestDecodePhases: a generation of n tokens counts its decode steps (the
// first token comes from the prompt's step, not a decode one) and their
// rows, and splits their time into graph, KV and sampling, each above
// zero; ByRows holds them under one row.
func TestDecodePhases(t *testing.T) {
	m := loadTiny(t, Options{})
	p0 := m.Phases() // Load's warm-up decodes too
	const n = 6
	out := collect(t, m, prompt(9, m.Geometry().Vocab), GenerateOptions{MaxTokens: n})
	if len(out) != n {
		t.Fatalf("%d tokens, want %d", len(out), n)
	}
	p1 := m.Phases()
	p := DecodePhases{Steps: p1.Steps - p0.Steps, Rows: p1.Rows - p0.Rows, Graph: p1.Graph - p0.Graph, KV: p1.KV - p0.KV, Sample: p1.Sample - p0.Sample}
	t.Logf("%+v", p)
	if p.Steps != n-1 || p.Rows != n-1 {
		t.Errorf("steps %d, rows %d: want %d decode steps of one row", p.Steps, p.Rows, n-1)
	}
	if p.Graph <= 0 || p.KV <= 0 || p.Sample <= 0 {
		t.Errorf("a phase without time: %+v", p)
	}
	if got := rowSteps(p1, 1) - rowSteps(p0, 1); got != n-1 || len(p1.ByRows) != 1 {
		t.Errorf("ByRows %+v after %+v: want the %d steps under one row, and no other count", p1.ByRows, p0.ByRows, n-1)
	}
}

// rowSteps is p's steps of the given rows.
func rowSteps(p DecodePhases, rows int) uint64 {
	for _, r := range p.ByRows {
		if r.Rows == rows {
			return r.Steps
		}
	}
	return 0
}
