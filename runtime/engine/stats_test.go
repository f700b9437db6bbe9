package engine

import (
	"reflect"
	"testing"
	"time"
)

// TestDecodePhasesSince: the steps between two snapshots, by row count too;
// a count that ran only since the first snapshot is kept whole, and one that
// took no step since is left out; Row finds a count's entry, or none.
func TestDecodePhasesSince(t *testing.T) {
	p0 := DecodePhases{Steps: 10, Rows: 30, Graph: 10 * time.Millisecond, KV: time.Millisecond, Sample: 2 * time.Millisecond,
		ByRows: []RowPhases{{Rows: 1, Steps: 4, Graph: 2 * time.Millisecond}, {Rows: 4, Steps: 6, Graph: 8 * time.Millisecond}}}
	p1 := DecodePhases{Steps: 25, Rows: 120, Graph: 40 * time.Millisecond, KV: 3 * time.Millisecond, Sample: 5 * time.Millisecond,
		ByRows: []RowPhases{{Rows: 1, Steps: 4, Graph: 2 * time.Millisecond}, {Rows: 4, Steps: 11, Graph: 18 * time.Millisecond},
			{Rows: 8, Steps: 10, Graph: 20 * time.Millisecond}}}
	want := DecodePhases{Steps: 15, Rows: 90, Graph: 30 * time.Millisecond, KV: 2 * time.Millisecond, Sample: 3 * time.Millisecond,
		ByRows: []RowPhases{{Rows: 4, Steps: 5, Graph: 10 * time.Millisecond}, {Rows: 8, Steps: 10, Graph: 20 * time.Millisecond}}}
	if got := p1.Since(p0); !reflect.DeepEqual(got, want) {
		t.Fatalf("Since = %+v, want %+v", got, want)
	}
	if r := want.Row(8); r.Steps != 10 || r.Graph != 20*time.Millisecond {
		t.Errorf("Row(8) = %+v", r)
	}
	if r := want.Row(1); r != (RowPhases{Rows: 1}) {
		t.Errorf("Row(1) = %+v: want no steps", r)
	}
}
