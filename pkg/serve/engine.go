package serve

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/llm"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/sched"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// This file is the server's only contact with runtime/engine.

// EngineBackend serves an *engine.Engine. It is safe for concurrent use;
// Close stops its record pump (the engine stays open: its owner closes it).
type EngineBackend struct {
	e      *engine.Engine
	models []Model

	obsMu sync.Mutex
	obs   map[int]func(*metrics.Timeline)
	obsN  int

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// recordPoll is how often finished requests' records are drained from
// the engine for observers (/metrics).
const recordPoll = 100 * time.Millisecond

// NewEngineBackend describes e's models (reading each bundle's chat
// template from its manifest) and starts draining its records. The
// server must be the engine's only reader of Records.
func NewEngineBackend(e *engine.Engine) (*EngineBackend, error) {
	b := &EngineBackend{e: e, obs: map[int]func(*metrics.Timeline){}, stop: make(chan struct{}), done: make(chan struct{})}
	now := time.Now()
	for _, info := range e.Models() {
		m := Model{Name: info.Name, Kind: info.Kind, Created: now.Add(-info.LoadTime), Version: info.Version,
			Quantization: info.Quantization, Provider: info.Provider, Runtime: "onnxruntime " + info.ORTVersion}
		if info.Geometry != nil {
			m.Context = info.Geometry.MaxPositions
		}
		m.Tokenizer = e.Tokenizer(info.Name)
		if info.Kind == string(bundle.KindDecoder) {
			chat, err := chatOf(info.Path)
			if err != nil {
				return nil, fmt.Errorf("serve: model %s: %w", info.Name, err)
			}
			if chat != nil {
				m.Chat = chat
				var specials []string
				if m.Tokenizer != nil {
					specials = m.Tokenizer.SpecialTokens()
				}
				if end := chat.TurnEnd(specials); end != "" {
					m.Stop = []string{end}
				}
			}
		}
		b.models = append(b.models, m)
	}
	go b.pump()
	return b, nil
}

// chatOf reads the chat template of the bundle in dir, nil when it has
// none (or dir is not a bundle: a bare .onnx file).
func chatOf(dir string) (*tokenizer.ChatTemplate, error) {
	data, err := os.ReadFile(filepath.Join(dir, bundle.ManifestFile))
	if err != nil {
		return nil, nil
	}
	man, err := bundle.ParseManifest(data)
	if err != nil || man.Chat == nil {
		return nil, err
	}
	return tokenizer.NewChatTemplate(tokenizer.ChatTemplateConfig{
		Template: man.Chat.Template, BOSToken: man.Chat.BOSToken, EOSToken: man.Chat.EOSToken})
}

// Close stops the record pump; it is idempotent.
func (b *EngineBackend) Close() error {
	b.closeOnce.Do(func() { close(b.stop) })
	<-b.done
	return nil
}

// Models implements Backend.
func (b *EngineBackend) Models() []Model { return b.models }

func (b *EngineBackend) model(name string) *Model {
	for i := range b.models {
		if b.models[i].Name == name {
			return &b.models[i]
		}
	}
	return nil
}

// Generate implements Backend.
func (b *EngineBackend) Generate(ctx context.Context, req GenerateRequest) Stream {
	opts := engine.GenerateOptions{MaxTokens: req.MaxTokens, Stop: req.Stop, Class: classOf(req.Class),
		SLO: sched.SLO{TTFT: req.SLO.TTFT, TPOT: req.SLO.TPOT, Deadline: req.SLO.Deadline}, FailFast: req.FailFast}
	if s := req.Sampling; s != nil {
		opts.Sampling = llm.SamplingParams{Temperature: s.Temperature, TopP: s.TopP, TopK: s.TopK, Seed: s.Seed}
	}
	ctxLen := 0
	if m := b.model(req.Model); m != nil {
		ctxLen = m.Context
	}
	return &engineStream{ctx: ctx, b: b, req: req, opts: opts, ctxLen: ctxLen}
}

// engineStream counts what the engine's token stream does not report yet
// (tokens, why it ended) into a Summary.
type engineStream struct {
	ctx    context.Context
	b      *EngineBackend
	req    GenerateRequest
	opts   engine.GenerateOptions
	ctxLen int
	sum    Summary
}

func (s *engineStream) Tokens() iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) {
		s.sum = Summary{PromptTokens: len(s.req.Prompt)}
		for t, err := range s.b.e.GenerateTokens(s.ctx, s.req.Model, s.req.Prompt, s.opts) {
			if err != nil {
				s.sum.Err, s.sum.Finish = convertErr(err), finishOf(err)
				yield(Token{}, s.sum.Err)
				return
			}
			if t.Index >= 0 {
				s.sum.OutputTokens++
			}
			if !yield(Token{Text: t.Text, Time: t.Time}, nil) {
				s.sum.Finish = FinishCancelled
				return
			}
		}
		switch {
		case s.ctx.Err() != nil:
			s.sum.Finish = finishOf(s.ctx.Err())
		case s.ctxLen > 0 && s.sum.PromptTokens+s.sum.OutputTokens >= s.ctxLen:
			s.sum.Finish = FinishContextLength
		case s.sum.OutputTokens >= s.opts.MaxTokens && s.opts.MaxTokens > 0:
			s.sum.Finish = FinishLength
		default:
			s.sum.Finish = FinishStop
		}
	}
}

func (s *engineStream) Summary() Summary { return s.sum }

func finishOf(err error) Finish {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, sched.ErrCancelled):
		return FinishCancelled
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, sched.ErrTimeout):
		return FinishDeadline
	}
	return FinishError
}

func convertErr(err error) error {
	var oe *sched.OverloadError
	if errors.As(err, &oe) {
		return &OverloadError{RetryAfter: oe.RetryAfter, Reason: err.Error()}
	}
	return err
}

func classOf(c Class) sched.Class {
	switch c {
	case ClassRealtime:
		return sched.ClassRealtime
	case ClassBatch:
		return sched.ClassBatch
	}
	return sched.ClassInteractive
}

// Infer implements Backend.
func (b *EngineBackend) Infer(ctx context.Context, model string, inputs map[string]Tensor, opts InferOptions) (map[string]Tensor, error) {
	in := engine.Inputs{}
	defer func() { _ = ort.CloseAll(in) }()
	for name, t := range inputs {
		dt, ok := dtypes[t.DType]
		if !ok {
			return nil, fmt.Errorf("%w: input %q: dtype %q", errBadTensor, name, t.DType)
		}
		ot, err := ort.CopyBytes(dt, t.Shape, t.Data)
		if err != nil {
			return nil, fmt.Errorf("%w: input %q: %v", errBadTensor, name, err)
		}
		in[name] = ot
	}
	out, err := b.e.Infer(ctx, model, in, classOf(opts.Class))
	if err != nil {
		return nil, convertErr(err)
	}
	defer func() { _ = ort.CloseAll(out) }()
	res := map[string]Tensor{}
	for name, t := range out {
		res[name] = Tensor{DType: t.DType().String(), Shape: t.Shape(), Data: append([]byte(nil), t.Bytes()...)}
	}
	return res, nil
}

var dtypes = map[string]ort.DType{
	"float32": ort.Float32, "float64": ort.Float64, "int64": ort.Int64, "int32": ort.Int32,
	"int8": ort.Int8, "uint8": ort.Uint8, "bool": ort.Bool, "int16": ort.Int16, "uint16": ort.Uint16,
}

// Stats implements Backend.
func (b *EngineBackend) Stats() Stats {
	st := b.e.Stats()
	out := Stats{Running: st.Sched.Running, KV: map[string]KVStats{}}
	for _, q := range st.Sched.Queued {
		out.Queued += q
	}
	for name, kv := range st.KV {
		out.KV[name] = KVStats{BlocksUsed: kv.BlocksUsed, BlocksTotal: kv.BlocksTotal, BytesUsed: kv.BytesUsed, BytesTotal: kv.BytesTotal}
	}
	return out
}

// Observe implements Backend.
func (b *EngineBackend) Observe(fn func(*metrics.Timeline)) (remove func()) {
	b.obsMu.Lock()
	defer b.obsMu.Unlock()
	id := b.obsN
	b.obsN++
	b.obs[id] = fn
	return func() {
		b.obsMu.Lock()
		delete(b.obs, id)
		b.obsMu.Unlock()
	}
}

// pump drains the engine's records and hands them to the observers.
func (b *EngineBackend) pump() {
	defer close(b.done)
	t := time.NewTicker(recordPoll)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			b.deliver()
			return
		case <-t.C:
			b.deliver()
		}
	}
}

func (b *EngineBackend) deliver() {
	recs := b.e.Records()
	if len(recs) == 0 {
		return
	}
	b.obsMu.Lock()
	fns := make([]func(*metrics.Timeline), 0, len(b.obs))
	for _, fn := range b.obs {
		fns = append(fns, fn)
	}
	b.obsMu.Unlock()
	for _, r := range recs {
		tl := timelineOf(r)
		for _, fn := range fns {
			fn(tl)
		}
	}
}

func timelineOf(t sched.Timeline) *metrics.Timeline {
	class := t.Class
	if class == sched.ClassUnset {
		class = sched.ClassInteractive
	}
	m := metrics.NewTimeline(t.ID, class.String(), t.Arrived, len(t.TokenTimes))
	m.Admitted, m.FirstScheduled = t.Admitted, t.FirstScheduled
	for _, at := range t.TokenTimes {
		m.Token(at)
	}
	m.Preempted, m.PromptTokens = t.Preemptions, t.PromptTokens
	m.SLO = metrics.SLO{TTFT: t.SLO.TTFT, TPOT: t.SLO.TPOT, E2E: t.SLO.Deadline}
	o := metrics.Failed
	switch t.Outcome {
	case sched.OutcomeCompleted:
		o = metrics.Completed
	case sched.OutcomeCancelled:
		o = metrics.Cancelled
	case sched.OutcomeRejected:
		o = metrics.Rejected
	case sched.OutcomeTimedOut:
		o = metrics.TimedOut
	}
	m.Finish(t.Finished, o)
	return m
}
