package loadgen

import (
	"strings"
	"testing"
)

// TestSweepSearch: the search finds a limit only when some trial failed;
// otherwise its figure is a lower bound and it says why it stopped.
func TestSweepSearch(t *testing.T) {
	for _, tt := range []struct {
		name       string
		max        float64
		trials     int
		knee       float64 // loads ≤ knee are stable
		want       string
		lowerBound bool
	}{
		{"bracketed", 128, 8, 11, "11", false},
		{"out of trials while stable", 16, 4, 100, "≥ 8 (ran out of trials (max_trials 4)", true},
		{"stable at max", 16, 8, 100, "≥ 16 (still stable at the sweep's max 16", true},
		{"lowest fails", 16, 8, 0, "none", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := Sweep{Mode: "concurrency", Min: 1, Max: tt.max}
			out := &SweepResult{Mode: w.Mode}
			var loads []float64
			err := search(w, tt.trials, 1, out, func(load float64) (SweepPoint, error) {
				loads = append(loads, load)
				return SweepPoint{Load: load, Stable: load <= tt.knee}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := out.MaxStableText(); !strings.HasPrefix(got, tt.want) || out.LowerBound != tt.lowerBound {
				t.Fatalf("loads %v: %q lower bound %v, want %q %v", loads, got, out.LowerBound, tt.want, tt.lowerBound)
			}
			if tt.knee == 0 && out.Stopped != "the lowest load (1) was already unstable" {
				t.Fatalf("stopped: %q", out.Stopped)
			}
			if len(loads) > tt.trials {
				t.Fatalf("%d trials, max %d", len(loads), tt.trials)
			}
		})
	}
	// The default sweep doubles past the engine's batch of 8.
	if d := DefaultSweep(); d.Max <= 16 || d.MaxTrials < 6 {
		t.Fatalf("DefaultSweep %+v stops at the batch", d)
	}
}

// TestReportSaysLowerBound: a report whose sweep found no unstable load
// marks its max stable concurrency as a lower bound.
func TestReportSaysLowerBound(t *testing.T) {
	v := 8.0
	rep := BuildReport(&Result{Spec: Spec{Name: "x"}, Sweep: &SweepResult{Mode: "concurrency", MaxStable: &v, LowerBound: true,
		Stopped: "ran out of trials (max_trials 4) while still stable"}})
	if !rep.MaxStableIsLowerBound || *rep.MaxStableConcurrency != 8 || !strings.Contains(strings.Join(rep.Notes, "\n"), "≥ 8") {
		t.Fatalf("%+v %v", rep.MaxStableIsLowerBound, rep.Notes)
	}
	if got := maxStable(rep); !strings.HasPrefix(got, "≥ 8 (ran out of trials") {
		t.Fatalf("markdown says %q", got)
	}
}
