package serve

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// This file is the server's only contact with runtime/engine.

// EngineBackend serves an *engine.Engine. It is safe for concurrent use.
// The engine stays its owner's to close.
type EngineBackend struct {
	e      *engine.Engine
	models []Model
}

// NewEngineBackend describes e's models, reading each bundle's chat
// template from its manifest (and the template's turn-end marker).
func NewEngineBackend(e *engine.Engine) (*EngineBackend, error) {
	b := &EngineBackend{e: e}
	now := time.Now()
	for _, info := range e.Models() {
		m := Model{Name: info.Name, Kind: info.Kind, Created: now.Add(-info.LoadTime), Version: info.Version,
			Quantization: info.Quantization, Provider: info.Provider, Runtime: "onnxruntime " + info.ORTVersion}
		if info.Geometry != nil {
			m.Context = info.Geometry.MaxPositions
		}
		for _, v := range info.Inputs {
			m.Inputs = append(m.Inputs, v.Name)
		}
		for _, v := range info.Outputs {
			m.Outputs = append(m.Outputs, v.Name)
		}
		m.Tokenizer = e.Tokenizer(info.Name)
		if info.Kind == string(bundle.KindDecoder) && len(info.Plugins) > 0 {
			_, m.TextPlugin = info.Plugins["pre"]
			m.Plugins = true
		}
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

// Close is a no-op kept for symmetry: the engine tells observers itself.
func (b *EngineBackend) Close() error { return nil }

// Models implements Backend.
func (b *EngineBackend) Models() []Model { return b.models }

// Generate implements Backend.
func (b *EngineBackend) Generate(ctx context.Context, req GenerateRequest) Stream {
	opts := engine.GenerateOptions{MaxTokens: req.MaxTokens, Stop: req.Stop, Class: classOf(req.Class),
		SLO: engine.SLO{TTFT: req.SLO.TTFT, TPOT: req.SLO.TPOT, Deadline: req.SLO.Deadline}, FailFast: req.FailFast, ID: req.ID}
	if s := req.Sampling; s != nil {
		opts.Sampling = &engine.Sampling{Temperature: s.Temperature, TopP: s.TopP, TopK: s.TopK, Seed: s.Seed}
	}
	if req.Text != "" {
		opts.PromptHasSpecials = req.TextHasSpecials
		return &engineStream{s: b.e.Generate(ctx, req.Model, req.Text, opts)}
	}
	return &engineStream{s: b.e.GenerateTokens(ctx, req.Model, req.Prompt, opts)}
}

// Result implements ResultStream: the plugin tensors as JSON values.
func (s *engineStream) Result() (map[string]any, error) {
	ts, err := s.s.Result()
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, t := range ts {
		var data any
		switch t.DType {
		case abi.String:
			out[t.Name], _ = t.Text()
			continue
		case abi.Float32:
			data = elements(t.Float32s())
		case abi.Float64:
			data = elements(t.Float64s())
		case abi.Int64:
			data = elements(t.Int64s())
		case abi.Int32:
			data = elements(t.Int32s())
		default: // uint8: bytes, as base64 by encoding/json
			data = t.Data
		}
		out[t.Name] = map[string]any{"shape": t.Shape, "data": data}
	}
	return out, nil
}

// elements is a decoded plugin tensor's elements (typed: int64 stays exact,
// unlike values' float64s for an /infer response); the plugin ABI checked their
// count against the shape when the result crossed the boundary.
func elements[T any](v []T, _ error) any { return v }

// engineStream is the engine's stream in the server's terms.
type engineStream struct{ s *engine.Stream }

func (s *engineStream) Tokens() iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) {
		for t, err := range s.s.Tokens() {
			if err != nil {
				yield(Token{}, convertErr(err))
				return
			}
			if !yield(Token{ID: t.ID, Text: t.Text, Time: t.Time}, nil) {
				return
			}
		}
	}
}

func (s *engineStream) Summary() Summary {
	sum := s.s.Summary()
	return Summary{Finish: Finish(sum.Finish.String()), PromptTokens: sum.PromptTokens, OutputTokens: sum.OutputTokens, Err: convertErr(sum.Err)}
}

func convertErr(err error) error {
	if err == nil {
		return nil
	}
	var oe *engine.OverloadError
	if errors.As(err, &oe) {
		code := "overloaded"
		switch {
		case oe.Late:
			code = "overloaded_in_queue"
		case oe.Alone:
			code = "slo_unreachable"
		}
		return &OverloadError{RetryAfter: oe.RetryAfter, Reason: err.Error(), Code: code}
	}
	if errors.Is(err, engine.ErrInvalidRequest) || errors.Is(err, engine.ErrPromptTooLong) {
		return &apiError{Status: 400, Type: "invalid_request_error", Message: err.Error()}
	}
	return err
}

func classOf(c Class) engine.Class {
	switch c {
	case ClassRealtime:
		return engine.ClassRealtime
	case ClassBatch:
		return engine.ClassBatch
	}
	return engine.ClassInteractive
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
	out, err := b.e.Infer(ctx, model, in, engine.InferOptions{Class: classOf(opts.Class),
		SLO: engine.SLO{TTFT: opts.SLO.TTFT, TPOT: opts.SLO.TPOT, Deadline: opts.SLO.Deadline}, FailFast: opts.FailFast})
	if err != nil {
		if errors.Is(err, engine.ErrInvalidRequest) {
			return nil, fmt.Errorf("%w: %v", errBadTensor, err)
		}
		return nil, convertErr(err)
	}
	defer func() { _ = out.Close() }()
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
	out := Stats{Running: st.Scheduler.Running, KV: map[string]KVStats{}}
	for _, q := range st.Scheduler.Queued {
		out.Queued += q
	}
	for name, kv := range st.KV {
		out.KV[name] = KVStats{BlocksUsed: kv.BlocksUsed, BlocksTotal: kv.BlocksTotal, BytesUsed: kv.BytesUsed, BytesTotal: kv.BytesTotal}
	}
	return out
}

// Observe implements Backend: the engine's records are pkg/metrics
// timelines, told to its observers as requests finish.
func (b *EngineBackend) Observe(o metrics.Observer) (remove func()) {
	return b.e.Observe(o)
}
