package engine

import (
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// The engine turns ONNX Runtime's intra-op spinning off unless the
// caller's session options decide it (runtime/llm BenchmarkStepPerf has the
// measurements).
func TestSessionDefaultsSpinning(t *testing.T) {
	for _, tc := range []struct {
		name       string
		in         ort.Options
		noSpinning bool
	}{
		{"zero value", ort.Options{IntraOpThreads: 2}, true},
		{"NoSpinning already", ort.Options{NoSpinning: true}, true},
		{"spinning asked for", ort.Options{ConfigEntries: map[string]string{allowSpinning: "1"}}, false},
		{"entry says off", ort.Options{ConfigEntries: map[string]string{allowSpinning: "0"}}, false},
		{"other entries only", ort.Options{ConfigEntries: map[string]string{"session.disable_prepacking": "0"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sessionDefaults(tc.in)
			if got.NoSpinning != tc.noSpinning {
				t.Errorf("NoSpinning = %v, want %v", got.NoSpinning, tc.noSpinning)
			}
			if got.IntraOpThreads != tc.in.IntraOpThreads || len(got.ConfigEntries) != len(tc.in.ConfigEntries) {
				t.Errorf("sessionDefaults changed other fields: %+v from %+v", got, tc.in)
			}
		})
	}
}
