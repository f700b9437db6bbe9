package ort

import (
	"fmt"
	"maps"
)

// GraphOptimization is ONNX Runtime's graph optimisation level.
type GraphOptimization int

// Graph optimisation levels. The zero value means all optimisations, ONNX
// Runtime's own default.
const (
	OptimizeAll GraphOptimization = iota
	OptimizeDisabled
	OptimizeBasic
	OptimizeExtended
)

// ExecutionMode says whether independent graph nodes may run in parallel
// (on the inter-op thread pool).
type ExecutionMode int

// Execution modes; the zero value is sequential, ONNX Runtime's default.
const (
	Sequential ExecutionMode = iota
	Parallel
)

// Options configures a session. It is plain data (it may arrive in a
// configuration file or over the network); the zero value is usable: the
// library found by FindLibrary, ONNX Runtime's default threads, all graph
// optimisations, sequential execution and DefaultProviders.
type Options struct {
	// LibraryPath is an explicit ONNX Runtime library; "" searches (see
	// FindLibrary).
	LibraryPath string `json:"library_path,omitempty" yaml:"library_path,omitempty"`
	// IntraOpThreads is the size of the thread pool inside one operator;
	// 0 lets ONNX Runtime pick (one per physical core).
	IntraOpThreads int `json:"intra_op_threads,omitempty" yaml:"intra_op_threads,omitempty"`
	// InterOpThreads is the pool running independent nodes in Parallel
	// mode; 0 lets ONNX Runtime pick.
	InterOpThreads int `json:"inter_op_threads,omitempty" yaml:"inter_op_threads,omitempty"`
	// GraphOptimization is the optimisation level; zero is all.
	GraphOptimization GraphOptimization `json:"graph_optimization,omitempty" yaml:"graph_optimization,omitempty"`
	// ExecutionMode is sequential (zero) or parallel.
	ExecutionMode ExecutionMode `json:"execution_mode,omitempty" yaml:"execution_mode,omitempty"`
	// OptimizedModelPath, if set, makes ONNX Runtime write the optimised
	// graph there, so a later load can skip optimisation by loading it with
	// GraphOptimization OptimizeDisabled.
	OptimizedModelPath string `json:"optimized_model_path,omitempty" yaml:"optimized_model_path,omitempty"`
	// ProfilePrefix, if set, makes ONNX Runtime record every node's run
	// time and write them as Chrome-trace JSON to PREFIX_<date>.json when
	// the session closes: the way to see where a model's time goes.
	ProfilePrefix string `json:"profile_prefix,omitempty" yaml:"profile_prefix,omitempty"`
	// NoSpinning stops the intra- and inter-op threads from busy-waiting
	// between operators. Set it whenever two sessions run alternately in
	// one process (prefill and decode graphs): each spinning its own pool,
	// one session's threads hold the cores the other's need. After its
	// last run a pool kept one core busy for ~30 ms, and a session run
	// right after another's 96 batch-1 steps ran ~0.82× its rate
	// (runtime/engine's paired benchmarks, EDGEINFER_BENCH_SETTLE=0). It
	// costs a little latency per run for a session that runs alone.
	NoSpinning bool `json:"no_spinning,omitempty" yaml:"no_spinning,omitempty"`
	// DisableHugePages leaves the memory ONNX Runtime allocates for the model in
	// base pages. By default, after the session is created, the anonymous
	// memory that became resident while it was created is collapsed into
	// 2 MiB transparent huge pages (Linux), so the weights a step reads
	// cost a few hundred TLB entries instead of tens of thousands.
	DisableHugePages bool `json:"disable_huge_pages,omitempty" yaml:"disable_huge_pages,omitempty"`
	// ConfigEntries are passed to AddSessionConfigEntry verbatim, e.g.
	// "session.intra_op.allow_spinning": "0". They override NoSpinning.
	ConfigEntries map[string]string `json:"config_entries,omitempty" yaml:"config_entries,omitempty"`
	// Providers is the execution-provider preference, tried in order; nil
	// means DefaultProviders(). CPU is appended if missing, so the chain
	// always ends on something that runs.
	Providers []ProviderConfig `json:"providers,omitempty" yaml:"providers,omitempty"`
	// NoProbe skips the probe inference that checks an accelerator
	// provider actually runs the model before it is chosen.
	NoProbe bool `json:"no_probe,omitempty" yaml:"no_probe,omitempty"`
	// ProbeDims gives sizes for symbolic dimensions (by name, e.g.
	// "batch": 1) for the probe. Without them a model with symbolic input
	// dimensions is not probed: guessing sizes could reject a provider for
	// the guess's sake.
	ProbeDims map[string]int64 `json:"probe_dims,omitempty" yaml:"probe_dims,omitempty"`
}

// Validate checks ranges and provider names.
func (o Options) Validate() error {
	if o.IntraOpThreads < 0 || o.InterOpThreads < 0 {
		return fmt.Errorf("%w: thread counts must be >= 0 (got intra %d, inter %d)", ErrInvalidOptions, o.IntraOpThreads, o.InterOpThreads)
	}
	if o.GraphOptimization < OptimizeAll || o.GraphOptimization > OptimizeExtended {
		return fmt.Errorf("%w: graph optimisation level %d", ErrInvalidOptions, o.GraphOptimization)
	}
	if o.ExecutionMode != Sequential && o.ExecutionMode != Parallel {
		return fmt.Errorf("%w: execution mode %d", ErrInvalidOptions, o.ExecutionMode)
	}
	for _, p := range o.Providers {
		if !p.Name.known() {
			return fmt.Errorf("%w: unknown execution provider %q (known: %v)", ErrInvalidOptions, p.Name, allProviders)
		}
	}
	for name, d := range o.ProbeDims {
		if d <= 0 {
			return fmt.Errorf("%w: probe dimension %s=%d must be positive", ErrInvalidOptions, name, d)
		}
	}
	return nil
}

// configEntries merges NoSpinning with the explicit entries.
func (o Options) configEntries() map[string]string {
	m := map[string]string{}
	if o.NoSpinning {
		m["session.intra_op.allow_spinning"] = "0"
		m["session.inter_op.allow_spinning"] = "0"
	}
	maps.Copy(m, o.ConfigEntries)
	return m
}
