package loadgen

import (
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// The version matrix names the board profile and shows each choice against
// the engine config: threads set by the run are an override.
func TestVersionsPlatform(t *testing.T) {
	cfg := engine.Config{}
	cfg.Session.IntraOpThreads = 3
	v := collectVersions(&Result{EngineConfig: &cfg})
	if v.Platform == nil || v.Platform.Profile == "" || len(v.Platform.RecognisedBy) == 0 || !strings.Contains(v.Board, "profile "+v.Platform.Profile) {
		t.Fatalf("board %q platform %+v", v.Board, v.Platform)
	}
	found := false
	for _, c := range v.Platform.Choices {
		if c.Setting == "intra_op_threads" {
			found = true
			if c.Value != "3" || (c.Profile != "3" && c.Source != "config") {
				t.Errorf("threads choice %+v", c)
			}
		}
	}
	if !found {
		t.Errorf("no threads choice in %+v", v.Platform.Choices)
	}
}
