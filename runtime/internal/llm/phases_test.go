package llm

import "testing"

// TestDecodePhases: a generation of n tokens counts its decode steps (the
// first token comes from the prompt's step, not a decode one) and their
// rows, and splits their time into graph, KV and sampling, each above
// zero.
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
}
