package engine

// A decoder whose bundle lists plugins runs them around Generate: the pre
// plugin gets the prompt text as the String tensor "prompt" and must give
// one back (redaction, templating), which is what the model is prompted
// with; the post plugin gets the whole output text as the String tensor
// "text", with the pre plugin's other outputs, once the generation has
// ended, and what it returns is the stream's Result (a JSON extraction, a
// parsed answer). Tokens stream as the model samples them, untouched: a
// post-processor sees the whole text, so its result comes after the last
// token. The request's Record carries the plugins' time apart (Pre, Post),
// as for one-shot models.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

// The tensors a decoder's plugins exchange with the engine.
const (
	// PluginPrompt is the pre plugin's input and required output.
	PluginPrompt = "prompt"
	// PluginText is the output text given to the post plugin.
	PluginText = "text"
)

// openDecoderPlugins loads a decoder bundle's plugins; they work on text,
// so the bundle must carry a tokenizer.
func (e *Engine) openDecoderPlugins(ctx context.Context, m *model, b *bundle.Bundle) error {
	if b.Manifest.Plugins == nil {
		return nil
	}
	if m.tok == nil {
		return fmt.Errorf("%w: %s lists plugins, which work on text around Generate, but has no tokenizer", ErrConfig, b.Manifest.Name)
	}
	return e.openPlugins(ctx, m, b)
}

// generatePre runs the pre plugin on the prompt text and returns the
// prompt to submit, the tensors to pass to the post plugin, and its time.
func (s *Stream) generatePre(m *model) ([]int32, []abi.Tensor, time.Duration, error) {
	if !m.pl.HasPre() {
		return s.prompt, nil, 0, nil
	}
	if !s.text {
		return nil, nil, 0, fmt.Errorf("%w: %q runs a pre plugin on the prompt text: use Generate, not GenerateTokens", ErrInvalidRequest, s.model)
	}
	t0 := time.Now()
	feeds, pass, err := m.pl.Pre(s.ctx, []abi.Tensor{abi.Str(PluginPrompt, s.promptText)}, []string{PluginPrompt})
	pre := time.Since(t0)
	if err != nil {
		return nil, nil, pre, fmt.Errorf("engine: %s: %w", m.name, err)
	}
	text, err := feeds[0].Text()
	if err != nil {
		return nil, nil, pre, fmt.Errorf("engine: %s: pre plugin: %q must be a string tensor: %w", m.name, PluginPrompt, err)
	}
	return s.encode(m.tok, text), pass, pre, nil
}

// pluginRelay is relay for a model with plugins: it keeps the output text
// and, when the generation ended by itself (not an error, not a caller
// that stopped reading), runs the post plugin on it. Either way it gives
// the request's record its plugin times.
func (s *Stream) pluginRelay(yield func(Token, error) bool) {
	var text strings.Builder
	ended := true
	s.relay(func(t Token, err error) bool {
		if err != nil {
			ended = false
			return yield(t, err)
		}
		text.WriteString(t.Text)
		if !yield(t, nil) {
			ended = false
			return false
		}
		return true
	})
	var post time.Duration
	if ended {
		<-s.st.Done()
		ended = s.st.Err() == nil
	}
	if ended {
		t0 := time.Now()
		s.result, s.resultErr = s.ver.pl.Post(s.ctx, []abi.Tensor{abi.Str(PluginText, text.String())}, s.pass)
		post = time.Since(t0)
		if s.resultErr != nil {
			s.resultErr = fmt.Errorf("engine: %s: %w", s.ver.name, s.resultErr)
		}
	} else {
		s.resultErr = fmt.Errorf("%w: the generation did not end by itself, so the post plugin did not run", ErrInvalidRequest)
	}
	s.resulted = true
	s.e.pluginsDone(uint64(s.st.ID()), s.pre, post)
}

// Result is what the bundle's post plugin made of the whole output text
// (with the pre plugin's other outputs), once Tokens has ended; without a
// post plugin it is the text and those outputs. A model without plugins,
// or a generation that failed or was left early, gives an error.
func (s *Stream) Result() ([]abi.Tensor, error) {
	if !s.started {
		for range s.Tokens() {
		}
	}
	if s.resulted {
		return s.result, s.resultErr
	}
	return nil, fmt.Errorf("%w: %q lists no plugins", ErrInvalidRequest, s.model)
}
