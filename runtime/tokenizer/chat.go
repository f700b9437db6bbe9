package tokenizer

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// ChatTemplate is a model's Hugging Face chat template (the Jinja text of
// tokenizer_config.json's "chat_template"), compiled once. It renders a
// conversation into the prompt text the model was trained on, exactly as
// Hugging Face's apply_chat_template does (checked byte for byte against
// @huggingface/jinja on the templates of Llama-3, Qwen2.5, Qwen3, Mistral,
// Phi-3 and Gemma: see chat_test.go).
//
// The Jinja implementation is github.com/ardanlabs/jinja, chosen because
// it is pure Go with no dependencies, maintained for exactly this purpose
// (the templates in GGUF files), and renders every golden case identically
// (TestChatTemplateGolden: 128 of 128); BenchmarkChatTemplate measures
// rendering a four-turn conversation. github.com/nikolalohinski/gonja/v2
// (v2.9.1), the other maintained Go Jinja, matched 112 of the 128 and
// could not parse Gemma 3's template. Its newer releases need Go 1.27;
// v1.8.0 is pinned.
//
// A ChatTemplate is safe for concurrent use.
type ChatTemplate struct {
	src  string
	tmpl *jinja.Template
	bos  string
	eos  string
}

// ChatMessage is one turn of a conversation.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatTemplateConfig is what a chat template needs from
// tokenizer_config.json.
type ChatTemplateConfig struct {
	// Template is the Jinja source.
	Template string
	// BOSToken and EOSToken are the texts the template sees as
	// bos_token and eos_token ("" when the model has none).
	BOSToken, EOSToken string
}

// NewChatTemplate compiles cfg.Template. A template that does not parse
// gives ErrChatTemplate naming Jinja's complaint.
func NewChatTemplate(cfg ChatTemplateConfig) (*ChatTemplate, error) {
	if strings.TrimSpace(cfg.Template) == "" {
		return nil, fmt.Errorf("%w: empty template", ErrChatTemplate)
	}
	t, err := jinja.Compile(cfg.Template)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrChatTemplate, err)
	}
	return &ChatTemplate{src: cfg.Template, tmpl: t, bos: cfg.BOSToken, eos: cfg.EOSToken}, nil
}

// Source returns the template's Jinja text.
func (t *ChatTemplate) Source() string { return t.src }

// Render formats msgs. With addGenerationPrompt the text ends with the
// header of an assistant turn, so the model's continuation is the answer.
// A template that refuses the conversation (raise_exception: roles that do
// not alternate, a system message where none is allowed) gives
// ErrChatTemplate with the template's message.
//
// The result carries the template's own special tokens (bos_token
// included where the template writes it): encode it with
// AddSpecialTokens false and SplitSpecialTokens true, as Hugging Face
// does, or the prompt starts with two BOS tokens.
func (t *ChatTemplate) Render(msgs []ChatMessage, addGenerationPrompt bool) (string, error) {
	list := make([]any, len(msgs))
	for i, m := range msgs {
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	out, err := t.tmpl.Render(map[string]any{
		"messages":              list,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             t.bos,
		"eos_token":             t.eos,
	})
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrChatTemplate, err)
	}
	return out, nil
}

// turnEndProbe is assistant content no template alters (no spaces for
// trim to take, nothing Jinja treats specially).
const turnEndProbe = "edgeinferTurnEndProbe"

// TurnEnd returns what the template writes after an assistant's words:
// the marker the model was trained to emit when its turn is over
// ("<|eot_id|>" for Llama-3, "<|im_end|>" for Qwen, "<end_of_turn>" for
// Gemma, "<|end|>" for Phi-3, eos_token for Mistral). Generation stops on
// it, like on the generation config's end-of-sequence ids, because a
// model's generation config does not always list it (Llama-3 base lists
// only <|end_of_text|>).
//
// specials, when not empty, lists the tokenizer's special tokens: the
// marker is then the first special token after the words. Without them it
// is the first <…> tag there, or the text up to the first white space. "" means the template
// writes nothing recognisable there.
func (t *ChatTemplate) TurnEnd(specials []string) string {
	out, err := t.Render([]ChatMessage{{Role: "user", Content: "u"}, {Role: "assistant", Content: turnEndProbe}}, false)
	if err != nil {
		return ""
	}
	_, after, ok := strings.Cut(out, turnEndProbe)
	if !ok {
		return ""
	}
	after = strings.TrimLeftFunc(after, unicode.IsSpace)
	if len(specials) > 0 {
		best, at := "", len(after)+1
		for _, s := range specials {
			if i := strings.Index(after, s); i >= 0 && (i < at || i == at && len(s) > len(best)) {
				best, at = s, i
			}
		}
		return best
	}
	if strings.HasPrefix(after, "<") {
		if i := strings.IndexByte(after, '>'); i > 0 {
			return after[:i+1]
		}
	}
	if i := strings.IndexFunc(after, unicode.IsSpace); i >= 0 {
		after = after[:i]
	}
	return after
}
