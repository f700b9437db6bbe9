package loadgen

import (
	"context"
	"iter"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// Engine is what the harness needs of an engine; *engine.Engine implements
// it. The harness runs in-process, so what it measures is the SDK's own
// timeline, stamped on the device loop, which it receives as an observer.
type Engine interface {
	GenerateTokens(ctx context.Context, model string, prompt []int32, opts engine.GenerateOptions) *engine.Stream
	Observe(o engine.Observer) (remove func())
	Stats() engine.Stats
	Models() []engine.ModelInfo
	Scheduler() engine.SchedulerConfig
	Tokenizer(model string) *tokenizer.Tokenizer
}

var _ Engine = (*engine.Engine)(nil)

// backend is what a run drives: an in-process Engine, or an HTTPTarget
// (a remote server, whose records it stamps itself).
type backend interface {
	generate(ctx context.Context, model string, prompt []int32, opts engine.GenerateOptions) iter.Seq2[engine.Token, error]
	Observe(o engine.Observer) (remove func())
	Stats() engine.Stats
	Models() []engine.ModelInfo
	Scheduler() engine.SchedulerConfig
	Tokenizer(model string) *tokenizer.Tokenizer
}

// inProcess runs requests on an Engine.
type inProcess struct{ Engine }

func (p inProcess) generate(ctx context.Context, model string, prompt []int32, opts engine.GenerateOptions) iter.Seq2[engine.Token, error] {
	return p.GenerateTokens(ctx, model, prompt, opts).Tokens()
}

func classOf(s string) engine.Class {
	c, err := engine.ParseClass(s)
	if err != nil {
		return engine.ClassInteractive
	}
	return c
}
