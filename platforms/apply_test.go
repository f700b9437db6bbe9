package platforms

import (
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

func TestApplyFillsOnlyWhatIsUnset(t *testing.T) {
	p, err := Detect(DetectOptions{Root: "testdata/rk3588"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg engine.Config
	choices := Apply(p, &cfg)
	if cfg.Session.IntraOpThreads != 4 || cfg.Session.ConfigEntries[affinityKey] != "6;7;8" || cfg.KV.BudgetBytes != p.KV.Bytes {
		t.Fatalf("applied %+v kv %d", cfg.Session, cfg.KV.BudgetBytes)
	}
	for _, c := range choices {
		if c.Source != "profile" {
			t.Errorf("%v: want profile", c)
		}
	}

	// Overrides: explicit threads keep the pool unpinned (ONNX Runtime
	// wants one affinity per pool thread), an explicit chain and budget stay.
	cfg = engine.Config{KV: engine.KVOptions{BudgetBytes: 1 << 20}}
	cfg.Session.IntraOpThreads = 2
	cfg.Session.Providers = []ort.ProviderConfig{{Name: ort.XNNPACK}}
	choices = Apply(p, &cfg)
	if cfg.Session.IntraOpThreads != 2 || cfg.Session.ConfigEntries[affinityKey] != "" || cfg.KV.BudgetBytes != 1<<20 || cfg.Session.Providers[0].Name != ort.XNNPACK {
		t.Fatalf("overrides lost: %+v kv %d", cfg.Session, cfg.KV.BudgetBytes)
	}
	src := map[string]string{}
	for _, c := range choices {
		src[c.Setting] = c.Source
	}
	want := map[string]string{"board": "profile", "providers": "config", "intra_op_threads": "config", "thread_affinity": "config", "kv_budget_bytes": "config"}
	for k, v := range want {
		if src[k] != v {
			t.Errorf("%s from %s, want %s (%v)", k, src[k], v, choices)
		}
	}
	if err := cfg.Session.Validate(); err != nil {
		t.Error(err)
	}
}

func TestApplyDoesNotAliasThePlan(t *testing.T) {
	p, _ := Detect(DetectOptions{Root: "testdata/intel-core-ultra"})
	var cfg engine.Config
	Apply(p, &cfg)
	cfg.Session.Providers[0].Options["device_type"] = "CPU"
	if p.Providers[0].Options["device_type"] != "NPU" {
		t.Error("Apply shares the plan's option maps with the config")
	}
}
