package power

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"
)

func TestSplitLargestRemainder(t *testing.T) {
	cases := []struct {
		total   uint64
		weights []uint64
		want    []uint64
	}{
		{10, []uint64{1, 1, 1}, []uint64{4, 3, 3}},
		{100, []uint64{1, 3}, []uint64{25, 75}},
		{7, []uint64{0, 2, 5}, []uint64{0, 2, 5}},
		{1, []uint64{1, 1}, []uint64{1, 0}},
		{^uint64(0), []uint64{^uint64(0) / 2, ^uint64(0) / 2}, []uint64{1 << 63, 1<<63 - 1}},
		{5, []uint64{0, 0}, nil},
	}
	for _, c := range cases {
		if got := SplitLargestRemainder(c.total, c.weights); !slices.Equal(got, c.want) {
			t.Errorf("split %d by %v = %v, want %v", c.total, c.weights, got, c.want)
		}
	}
	if got := SplitByDuration(1000, []time.Duration{10 * time.Millisecond, 30 * time.Millisecond}); !slices.Equal(got, []uint64{250, 750}) {
		t.Errorf("by duration %v", got)
	}
}

func TestAttribute(t *testing.T) {
	a := Attribute([]Step{
		{EnergyUJ: 1000, Shares: []StepShare{{1, 3}, {2, 1}, {3, 1}}},
		{EnergyUJ: 333, Shares: []StepShare{{1, 1}, {2, 1}, {3, 1}}},
		{EnergyUJ: 50}, // an idle step: no tokens
	})
	if a.PerRequestUJ[1] != 600+111 || a.PerRequestUJ[2] != 200+111 || a.PerRequestUJ[3] != 200+111 || a.UnattributedUJ != 50 {
		t.Fatalf("%+v", a)
	}
	if a.Method != AttributionMethod || a.TotalUJ != 1383 {
		t.Fatalf("%+v", a)
	}
}

// FuzzAttribute checks the invariant: per-request sums plus the
// unattributed part equal the measured total exactly.
func FuzzAttribute(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Fuzz(func(t *testing.T, b []byte) {
		var steps []Step
		for len(b) >= 6 {
			st := Step{EnergyUJ: uint64(binary.LittleEndian.Uint32(b))}
			n := int(b[4] % 5)
			b = b[5:]
			for i := 0; i < n && len(b) > 0; i++ {
				st.Shares = append(st.Shares, StepShare{Request: uint64(b[0] % 7), Tokens: int(b[0] >> 3)})
				b = b[1:]
			}
			steps = append(steps, st)
		}
		a := Attribute(steps)
		var want, got uint64
		for _, st := range steps {
			want += st.EnergyUJ
		}
		for _, v := range a.PerRequestUJ {
			got += v
		}
		if got+a.UnattributedUJ != want || a.TotalUJ != want {
			t.Fatalf("attributed %d + %d != total %d", got, a.UnattributedUJ, want)
		}
	})
}
