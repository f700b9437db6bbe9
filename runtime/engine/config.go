package engine

import (
	"fmt"
	"log/slog"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/sched"
)

// ModelSpec names a model to open: either Dir, a bundle directory
// (edgeinfer.json beside the model) or, for one-shot models, a plain .onnx
// file; or Ref, a model in Config.Store ("name" for its active version,
// "name@version" for a given one).
type ModelSpec struct {
	// Name is how requests refer to the model; "" takes the manifest's name.
	Name string `json:"name,omitempty"`
	Dir  string `json:"dir,omitempty"`
	Ref  string `json:"ref,omitempty"`
}

// Config is the engine's configuration: plain data, with documented zero
// values, so it can arrive in a file or over MQTT.
type Config struct {
	// Models are opened by Open, in order.
	Models []ModelSpec `json:"models"`
	// Store is the path of the offline model store (pkg/store) that
	// ModelSpec.Ref names refer to; "" when every model has a Dir.
	Store string `json:"store,omitempty"`
	// Session configures every ONNX Runtime session (threads, providers).
	Session ort.Options `json:"session"`
	// KVBudgetBytes is each decoder's KV cache; 0 means 256 MiB.
	KVBudgetBytes int64 `json:"kv_budget_bytes,omitempty"`
	// DisablePrefixCache turns off prompt-prefix sharing in the KV cache.
	DisablePrefixCache bool `json:"disable_prefix_cache,omitempty"`
	// KVPrefault commits each decoder's KV budget at Open instead of page
	// by page on first use: the first requests pay no page faults (a fresh
	// block costs one per layer, K/V and head) and memory use is the
	// budget from the start.
	KVPrefault bool `json:"kv_prefault,omitempty"`
	// KVDisableHugePages maps the KV pools with base pages only. By
	// default they are advised transparent huge pages: batched decode reads
	// thousands of scattered blocks a step and measured ~5 % faster, at
	// the price of resident memory growing in 2 MiB steps.
	KVDisableHugePages bool `json:"kv_disable_huge_pages,omitempty"`
	// Sched configures the scheduler (batch, chunk, queues); zero values
	// are its defaults.
	Sched sched.Config `json:"sched"`
	// Logger receives the engine's logs; nil discards them.
	Logger *slog.Logger `json:"-"`
}

// Validate reports configuration errors before anything is loaded.
func (c Config) Validate() error {
	if len(c.Models) == 0 {
		return fmt.Errorf("%w: no models", ErrConfig)
	}
	for i, m := range c.Models {
		switch {
		case m.Dir == "" && m.Ref == "":
			return fmt.Errorf("%w: models[%d] has neither dir nor ref", ErrConfig, i)
		case m.Dir != "" && m.Ref != "":
			return fmt.Errorf("%w: models[%d] has both dir and ref", ErrConfig, i)
		case m.Ref != "" && c.Store == "":
			return fmt.Errorf("%w: models[%d] ref %q needs a store path", ErrConfig, i, m.Ref)
		}
	}
	if c.KVBudgetBytes < 0 {
		return fmt.Errorf("%w: negative kv_budget_bytes", ErrConfig)
	}
	if err := c.Session.Validate(); err != nil {
		return fmt.Errorf("%w: session: %w", ErrConfig, err)
	}
	if err := c.Sched.Validate(); err != nil {
		return fmt.Errorf("%w: sched: %w", ErrConfig, err)
	}
	return nil
}
