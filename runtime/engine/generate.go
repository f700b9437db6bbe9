package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/internal/llm"
	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// GenerateOptions configures one generation request. The zero value uses
// the bundle's generation defaults.
type GenerateOptions struct {
	// Sampling overrides the bundle's generation defaults (its
	// generation_config: temperature, top-k, top-p, repetition penalty);
	// nil takes them, and a bundle without defaults decodes greedily.
	// &Sampling{} asks for greedy decoding whatever the bundle says.
	Sampling *Sampling
	// MaxTokens bounds the output (FinishLength). Zero takes the bundle's
	// max_new_tokens; without one, generation runs until an end token or
	// the end of the context (FinishContextLength).
	MaxTokens int
	// Stop strings end the output (FinishStopString); they are never
	// emitted, even when they span tokens.
	Stop []string
	// Class is the priority class; the zero value is interactive.
	Class Class
	// SLO is what the request must meet; zero fields are unbounded.
	SLO SLO
	// FailFast refuses the request at once (an *OverloadError with a
	// retry-after) when its TTFT SLO cannot be met, instead of queueing it.
	FailFast bool
	// ID is the caller's request id, carried into the Summary (the server
	// uses it for its response id); "" gets the engine's number.
	ID string
	// PromptHasSpecials says Generate's prompt already carries its special
	// tokens (a rendered chat template writes its own BOS): it is encoded
	// without adding the tokenizer's. Chat sets it itself.
	PromptHasSpecials bool
	// MaxPromptTokens refuses at once, with a *PromptError, a prompt of
	// more tokens; 0: the context alone bounds it.
	MaxPromptTokens int
	// FitContext refuses at once, with a *PromptError, a prompt that
	// leaves the context no room for MaxTokens tokens (at least one),
	// where without it the output would be cut at FinishContextLength;
	// with MaxTokens zero it generates up to the end of the context,
	// whatever the bundle's max_new_tokens. The HTTP API asks for it.
	FitContext bool
	// Constraint restricts the output to a grammar (JSONSchema, JSON,
	// Regex); nil generates freely. It needs a model with a tokenizer.
	Constraint *Constraint
	// LogProbs fills each Token's LogProb and Bytes; TopLogProbs (0 to
	// MaxTopLogProbs, and it implies LogProbs) its Top alternatives.
	LogProbs    bool
	TopLogProbs int
	// KeepAlive, when set, is how long the model stays loaded after this
	// request (and its last one after it that sets none): 0 unloads it
	// once idle, negative keeps it; nil leaves the model's (at first
	// Config.KeepAlive). It matters for models that can be unloaded
	// (resident.go).
	KeepAlive *time.Duration
	// Tools, for Chat, are the functions the model may call: OpenAI tool
	// objects ({"type": "function", "function": {"name", "description",
	// "parameters"}}) as JSON, rendered by the chat template's tools
	// variable (tokenizer.ChatTemplate.RenderTools). They only tell the
	// model; what it may write is the Constraint's business (ToolCalls
	// builds one). A model without a template gets them as a paragraph of
	// JSON each before the turns.
	Tools []json.RawMessage
}

// ChatMessage is one turn of a conversation for Chat: its role ("system",
// "user", "assistant", "tool", ...), its text, and for tool turns the
// assistant's ToolCalls or the result's ToolCallID and Name.
type ChatMessage = tokenizer.ChatMessage

// ToolCall is a call an assistant turn made (ChatMessage.ToolCalls).
type ToolCall = tokenizer.ToolCall

// FunctionCall is a ToolCall's function name and JSON arguments.
type FunctionCall = tokenizer.FunctionCall

// Token is one generated token: its id, its text, its index in the output
// and when it was sampled. Text is complete UTF-8: a character split over
// tokens arrives with the token that completes it, and a token whose text
// may begin a stop string is held until that is decided — so Text can be
// empty, and one token can carry the text of the ones held before it.
type Token struct {
	ID    int32
	Text  string
	Index int
	Time  time.Time
	// LogProb, with GenerateOptions.LogProbs, is the token's natural-log
	// probability under the distribution it was drawn from: the model's
	// logits after the penalties and the constraint's mask, divided by the
	// temperature (1 for greedy decoding), before top-k, top-p and min-p.
	// Bytes are the token's own bytes (Text is what the stream releases,
	// which can hold part of a character or a stop string back), and Top
	// the GenerateOptions.TopLogProbs most likely tokens of that
	// distribution, most likely first.
	LogProb float32
	Bytes   []byte
	Top     []TokenLogProb
}

// TokenLogProb is one of a Token's most likely alternatives.
type TokenLogProb struct {
	ID      int32
	Bytes   []byte
	LogProb float32
}

// Summary is how a generation ended, from the stream's own record.
type Summary struct {
	// ID is GenerateOptions.ID, or the engine's request number.
	ID    string
	Model string
	// Version is the model version that served the request.
	Version string
	Finish  FinishReason
	// Err is the error that ended the request (nil when it completed).
	Err error
	// PromptTokens and OutputTokens count tokens; CachedTokens the prompt
	// prefix found in the KV cache.
	PromptTokens, OutputTokens, CachedTokens int
	// TTFT is arrival → first token; TPOT the mean time per token after
	// the first; Queue arrival → first scheduled; E2E arrival → finish.
	TTFT, TPOT, Queue, E2E time.Duration
	// LoadTime is the model load the request waited for before it
	// arrived: set on the first request of a model loaded on demand.
	LoadTime time.Duration
}

// Stream is one generation request. Tokens runs it; Summary tells how it
// ended. A Stream is used by one goroutine.
type Stream struct {
	e      *Engine
	ctx    context.Context
	model  string
	prompt []int32
	text   bool
	// promptText is Generate's prompt, or Chat's once rendered; chat is
	// Chat's conversation, rendered when the request is submitted, by the
	// version that serves it.
	promptText string
	chat       []ChatMessage
	opts       GenerateOptions

	// pre is the pre plugin's time; pass its outputs for the post plugin;
	// result and resultErr Result's answer, set (resulted) once the
	// request is refused or a plugin model's generation is over.
	pre       time.Duration
	pass      []abi.Tensor
	result    []abi.Tensor
	resultErr error
	resulted  bool

	ver     *model
	dec     *llm.Decoding // the constraint and log-probabilities, or nil
	st      *sched.Stream
	sum     Summary
	summed  bool
	started bool
}

// Generate encodes prompt with the model's tokenizer and returns the
// request's stream. Nothing runs until Tokens is ranged over; breaking out
// of that loop or cancelling ctx ends the request within one step and frees
// its KV blocks.
func (e *Engine) Generate(ctx context.Context, model, prompt string, opts GenerateOptions) *Stream {
	return &Stream{e: e, ctx: ctx, model: model, opts: opts, text: true, promptText: prompt}
}

// Chat is Generate for a conversation: msgs are rendered by the model's
// chat template with the generation prompt and encoded as Hugging Face
// does (the template writes its own special tokens), and generation also
// stops at the template's turn end (ModelInfo.TurnEnd), which is never
// emitted. A model without a template (trained on plain text) gets the
// turns' contents one paragraph each, encoded as plain text. The template
// is the one of the version that serves the request (a swap changes it);
// one that refuses the conversation (roles that do not alternate, say)
// ends the stream with an error wrapping ErrChatTemplate.
func (e *Engine) Chat(ctx context.Context, model string, msgs []ChatMessage, opts GenerateOptions) *Stream {
	return &Stream{e: e, ctx: ctx, model: model, opts: opts, text: true, chat: msgs}
}

// encode is Generate's tokenisation of a prompt text.
func (s *Stream) encode(tok *tokenizer.Tokenizer, text string) []int32 {
	return encodeIDs(tok, text, !s.opts.PromptHasSpecials)
}

// encodeIDs is tok's encoding of text as the scheduler's token ids, the
// tokenizer's special tokens added where addSpecial says so (the text's own
// are always read as special tokens).
func encodeIDs(tok *tokenizer.Tokenizer, text string, addSpecial bool) []int32 {
	ids := tok.EncodeWith(text, tokenizer.EncodeOptions{AddSpecialTokens: addSpecial, SplitSpecialTokens: true})
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// checkVocab refuses a token id outside the model's vocabulary (the
// tokenizer's, else the decoder's); what names the ids in the error
// ("prompt", "input 2").
func (m *model) checkVocab(ids []int32, what string) error {
	vocab := 0
	if m.tok != nil {
		vocab = m.tok.VocabSize()
	} else if m.dec != nil {
		vocab = m.dec.Geometry().Vocab
	}
	for i, id := range ids {
		if id < 0 || (vocab > 0 && int(id) >= vocab) {
			return fmt.Errorf("%w: %s[%d]: token id %d is outside the vocabulary [0, %d)", ErrInvalidRequest, what, i, id, vocab)
		}
	}
	return nil
}

// GenerateTokens is Generate over token ids (Token.Text is filled when the
// model has a tokenizer).
func (e *Engine) GenerateTokens(ctx context.Context, model string, prompt []int32, opts GenerateOptions) *Stream {
	return &Stream{e: e, ctx: ctx, model: model, prompt: prompt, opts: opts}
}

// Tokens submits the request and yields its tokens as they are sampled,
// then ends; a refusal or failure is yielded as the last error. It may be
// ranged over once.
func (s *Stream) Tokens() iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) {
		if s.started {
			yield(Token{}, fmt.Errorf("%w: a stream's tokens can be read once", ErrInvalidRequest))
			return
		}
		s.started = true
		if err := s.submit(); err != nil {
			s.refused(err)
			yield(Token{}, err)
			return
		}
		defer s.st.Cancel() // a caller that leaves early cancels the request
		if s.ver.pl != nil {
			s.pluginRelay(yield) // generate_plugins.go
			return
		}
		s.relay(yield)
	}
}

// Summary waits until the request has left the scheduler and says how it
// ended. Called before Tokens, it runs the request to its end, discarding
// the tokens.
func (s *Stream) Summary() Summary {
	if !s.started {
		for range s.Tokens() {
		}
	}
	if !s.summed && s.st != nil {
		<-s.st.Done()
		s.summarise(s.st.Timeline(), s.st.Err())
	}
	return s.sum
}

func (s *Stream) submit() error {
	m, err := s.e.acquire(s.ctx, s.model, s.opts.KeepAlive)
	if err != nil {
		return err
	}
	if m.dec == nil {
		m.end()
		return fmt.Errorf("%w: %q is a one-shot model (use Infer)", ErrInvalidRequest, s.model)
	}
	s.ver = m
	sp, err := samplingFor(s.opts.Sampling, m.gen)
	if err == nil {
		err = s.prepare(m)
	}
	if err != nil {
		m.end()
		return err
	}
	maxTok := s.opts.MaxTokens
	switch {
	case maxTok > 0:
	case s.opts.FitContext:
		maxTok = m.info.Context - len(s.prompt)
	default:
		maxTok = m.gen.MaxNewTokens // 0: until an end token or the context's end
	}
	if s.dec, err = s.decoding(m, maxTok); err != nil { // constrain.go
		m.end()
		return err
	}
	req := sched.Request{
		Model: m.key, Class: s.opts.Class.sched(), Prompt: s.prompt, MaxTokens: maxTok,
		SLO: sched.SLO(s.opts.SLO), FailFast: s.opts.FailFast, Sampling: sp, OnFinish: m.end,
		LoadTime: m.takeLoad(),
	}
	if s.dec != nil {
		req.Attach = s.dec
	}
	s.st, err = s.e.s.Submit(s.ctx, req)
	if err != nil {
		m.end()
		return public(err)
	}
	return nil
}

// samplingFor is the request's sampling: the caller's, or the bundle's
// generation defaults when the caller left it unset.
func samplingFor(s *Sampling, g bundle.Generation) (sched.Sampling, error) {
	if s == nil {
		s = &Sampling{Temperature: float32(g.Temperature), TopK: g.TopK, TopP: float32(g.TopP),
			RepetitionPenalty: float32(g.RepetitionPenalty)}
	}
	if err := s.Validate(); err != nil {
		return sched.Sampling{}, err
	}
	return sched.Sampling(*s), nil
}

// prepare makes the prompt the version m reads: a conversation rendered by
// its chat template (whose turn end joins the stop strings), a text run
// through its pre plugin and encoded, ids checked against its vocabulary;
// then the prompt's length against the context and the options.
func (s *Stream) prepare(m *model) error {
	if s.text {
		if m.tok == nil {
			return fmt.Errorf("%w: %q (use GenerateTokens)", ErrNoTokenizer, s.model)
		}
		if s.chat != nil {
			text, specials, err := m.chatText(s.chat, s.opts.Tools)
			if err != nil {
				return fmt.Errorf("%w: %s: %w", ErrInvalidRequest, s.model, err)
			}
			s.promptText, s.opts.PromptHasSpecials = text, specials
			if m.info.TurnEnd != "" {
				s.opts.Stop = append(slices.Clip(s.opts.Stop), m.info.TurnEnd)
			}
		}
		if m.pl == nil || !m.pl.HasPre() { // else encoded from what the pre plugin makes of the text
			s.prompt = s.encode(m.tok, s.promptText)
		}
	} else {
		if err := m.checkVocab(s.prompt, "prompt"); err != nil {
			return err
		}
	}
	if m.pl != nil {
		var err error
		if s.prompt, s.pass, s.pre, err = s.generatePre(m); err != nil { // generate_plugins.go
			return err
		}
	}
	n := len(s.prompt)
	switch {
	case n == 0:
		return &PromptError{Model: s.model}
	case s.opts.MaxPromptTokens > 0 && n > s.opts.MaxPromptTokens:
		return &PromptError{Model: s.model, Tokens: n, Limit: s.opts.MaxPromptTokens}
	case s.opts.FitContext && n+max(s.opts.MaxTokens, 1) > m.info.Context:
		return &PromptError{Model: s.model, Tokens: n, Context: m.info.Context, MaxTokens: s.opts.MaxTokens}
	}
	return nil
}

// chatText is a conversation as the model reads it: rendered by its
// template, which writes its own special tokens (specials), or the turns'
// contents a paragraph each (tools and tool calls as JSON paragraphs).
func (m *model) chatText(msgs []ChatMessage, tools []json.RawMessage) (text string, specials bool, err error) {
	if m.chat == nil {
		var parts []string
		for _, t := range tools {
			parts = append(parts, compactJSON(t))
		}
		for _, x := range msgs {
			p := x.Content
			for _, c := range x.ToolCalls {
				call := `{"name":` + jsonString(c.Function.Name) + `,"arguments":` + compactJSON(json.RawMessage(c.Function.Arguments)) + `}`
				p = strings.TrimSpace(p + "\n" + call)
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n\n"), false, nil
	}
	text, err = m.chat.RenderTools(msgs, tools, true)
	return text, true, err
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

// relay passes the scheduler's tokens on, decoded and stop-matched.
func (s *Stream) relay(yield func(Token, error) bool) {
	m := s.ver
	var dec *tokenizer.StreamDecoder
	if m.tok != nil {
		dec = m.tok.NewStreamDecoder()
	}
	stop := llm.NewStopMatcher(s.opts.Stop)
	var held []Token // tokens whose text is not decided yet
	var heldText string
	release := func(text string) bool {
		text, heldText = heldText+text, ""
		for i := range held {
			if i == len(held)-1 {
				held[i].Text = text
			}
			if !yield(held[i], nil) {
				return false
			}
		}
		held = held[:0]
		return true
	}
	for t, err := range s.st.Tokens() {
		if err != nil {
			yield(Token{}, public(err))
			return
		}
		tok := Token{ID: t.ID, Index: t.Index, Time: t.Time}
		if s.dec != nil && s.dec.LogProbs != nil {
			s.logProbs(&tok)
		}
		if dec == nil {
			if !yield(tok, nil) {
				return
			}
			continue
		}
		piece, err := dec.Add(int(t.ID))
		if err != nil {
			s.st.Cancel()
			yield(Token{}, fmt.Errorf("%w: decode token %d: %w", ErrModel, t.ID, err))
			return
		}
		text, stopped := stop.Push(piece)
		held = append(held, tok)
		if stopped {
			s.st.Stop() // recorded as completed, finish reason stop_string
			release(text)
			return
		}
		if dec.Pending() || stop.Holding() {
			heldText += text // goes out with the token that decides it
			continue
		}
		if !release(text) {
			return
		}
	}
	if dec != nil && len(held) > 0 {
		release(stop.Flush() + dec.Flush())
	}
}

// logProbs fills a token's log-probabilities from what sampling recorded.
func (s *Stream) logProbs(tok *Token) {
	lp, ok := s.dec.LogProbs.Take(tok.Index)
	if !ok {
		return
	}
	bytesOf := func(id int32) []byte {
		if s.ver.tok == nil {
			return nil
		}
		b, _ := s.ver.tok.AppendTokenBytes(nil, int(id), false)
		return b
	}
	tok.LogProb, tok.Bytes = lp.LogProb, bytesOf(tok.ID)
	if len(lp.Top) > 0 {
		tok.Top = make([]TokenLogProb, len(lp.Top))
		for i, x := range lp.Top {
			tok.Top[i] = TokenLogProb{ID: x.Token, Bytes: bytesOf(x.Token), LogProb: x.LogProb}
		}
	}
}

// refused fills the summary of a request that never reached the scheduler.
func (s *Stream) refused(err error) {
	s.summed = true
	s.sum = Summary{ID: s.opts.ID, Model: s.model, Finish: FinishRejected, Err: err, PromptTokens: len(s.prompt)}
	s.resultErr, s.resulted = err, true // Result (generate_plugins.go)
}

func (s *Stream) summarise(tl sched.Timeline, err error) {
	s.summed = true
	s.sum = Summary{
		ID: s.opts.ID, Model: s.model, Version: s.ver.info.Version,
		Finish: FinishReason(tl.Finish), Err: public(err),
		PromptTokens: tl.PromptTokens, OutputTokens: tl.OutputTokens(), CachedTokens: tl.CachedTokens,
		TTFT: tl.TTFT(), TPOT: tl.TPOT(), Queue: tl.QueueTime(), E2E: tl.E2E(), LoadTime: tl.LoadTime,
	}
	if s.sum.ID == "" {
		s.sum.ID = fmt.Sprint(tl.ID)
	}
}
