// Package tokenizer implements Hugging Face tokenizer.json byte-pair
// encoding in pure Go: the byte-level BPE of GPT-2, Llama-3 and Qwen
// (ByteLevel and Split pre-tokenizers, the latter's look-ahead pattern
// hand-written), added and special tokens, the NFC/NFKC normalisers, and
// the sentencepiece-style BPE of Llama-2 and Mistral (Metaspace, byte
// fallback). WordPiece and Unigram models are rejected with ErrUnsupported.
//
// Token ids are Go ints. Encoding is deterministic and, for the files the
// tests cover, identical to Hugging Face's tokenizers.
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Tokenizer encodes text to token ids and back. It is read-only after
// Parse or Load, so one Tokenizer is safe for concurrent use by any number
// of goroutines; its merge cache is internally synchronised.
type Tokenizer struct {
	model     *bpe
	normalize normalizer
	pre       *preTokenizer
	dec       *decoder
	// Added tokens matched in the raw text (normalized=false) and in the
	// normalised text (normalized=true).
	addedRawM, addedNormM *addedMatcher
	addedList             []*addedToken

	tokens  []string // id -> vocabulary string, added tokens included
	decoded decodeTable
	special []bool // id -> is a special added token

	prefix, suffix []int // post-processor template around a single sequence

	bos, eos int // -1 when unknown
	cache    *mergeCache
}

// Option configures Parse and Load.
type Option func(*options)

type options struct {
	cacheEntries int
	config       []byte
}

// DefaultCacheEntries is the merge cache size unless WithCacheSize says
// otherwise: enough for the working vocabulary of a book.
const DefaultCacheEntries = 1 << 15

// WithCacheSize bounds the BPE merge cache to n pieces; 0 disables it.
func WithCacheSize(n int) Option { return func(o *options) { o.cacheEntries = n } }

// WithConfig supplies the content of tokenizer_config.json, whose
// bos_token and eos_token name the special tokens BOS and EOS return.
// Load reads tokenizer_config.json beside tokenizer.json by itself.
func WithConfig(tokenizerConfigJSON []byte) Option {
	return func(o *options) { o.config = tokenizerConfigJSON }
}

// Load reads a tokenizer.json file, and tokenizer_config.json from the same
// directory when it exists.
func Load(path string, opts ...Option) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load: %w", err)
	}
	cfg, err := os.ReadFile(filepath.Join(filepath.Dir(path), "tokenizer_config.json"))
	switch {
	case err == nil:
		opts = append([]Option{WithConfig(cfg)}, opts...)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("tokenizer: load: %w", err)
	}
	t, err := Parse(data, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return t, nil
}

// Parse builds a Tokenizer from the content of a tokenizer.json file.
func Parse(data []byte, opts ...Option) (*Tokenizer, error) {
	o := options{cacheEntries: DefaultCacheEntries}
	for _, f := range opts {
		f(&o)
	}
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(f.Model) == 0 || string(f.Model) == "null" {
		return nil, fmt.Errorf("%w: no model", ErrMalformed)
	}
	var m bpeModelJSON
	if err := json.Unmarshal(f.Model, &m); err != nil {
		return nil, fmt.Errorf("%w: model: %w", ErrMalformed, err)
	}
	if m.Type != "BPE" && m.Type != "" {
		return nil, fmt.Errorf("%w: model type %q (only BPE is implemented)", ErrUnsupported, m.Type)
	}
	if m.Type == "" && m.Merges == nil {
		return nil, fmt.Errorf("%w: model without a type and without merges (not BPE)", ErrUnsupported)
	}
	// The vocabulary is decoded only now: Unigram's is a list, not a map.
	if v, ok := scanVocab(m.RawVocab); ok {
		m.Vocab = v
	} else if err := json.Unmarshal(m.RawVocab, &m.Vocab); len(m.RawVocab) > 0 && err != nil {
		return nil, fmt.Errorf("%w: model vocab: %w", ErrMalformed, err)
	}

	t := &Tokenizer{bos: -1, eos: -1, cache: newMergeCache(o.cacheEntries)}
	var err error
	if t.normalize, err = buildNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = buildPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if t.dec, err = buildDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if t.model, err = newBPE(&m, t.pre.byteLevel); err != nil {
		return nil, err
	}
	if err := t.buildAdded(f.AddedTokens); err != nil {
		return nil, err
	}
	if err := t.buildPostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if err := t.readConfig(o.config); err != nil {
		return nil, err
	}
	t.decoded = newDecodeTable(t.dec, t.tokens)
	return t, nil
}

func (t *Tokenizer) buildAdded(list []addedTokenJSON) error {
	size := len(t.model.idToToken)
	for _, a := range list {
		if a.ID < 0 || a.ID > maxSparseID(len(t.model.vocab)+len(list)) {
			return fmt.Errorf("%w: added token %q has id %d", ErrMalformed, a.Content, a.ID)
		}
		size = max(size, a.ID+1)
	}
	t.tokens = slices.Grow(slices.Clone(t.model.idToToken), size)[:size]
	t.special = make([]bool, size)
	for _, a := range list {
		tok := &addedToken{id: a.ID, content: a.Content, singleWord: a.SingleWord,
			lstrip: a.LStrip, rstrip: a.RStrip, normalized: a.Normalized, special: a.Special}
		t.addedList = append(t.addedList, tok)
		t.tokens[a.ID] = a.Content
		t.special[a.ID] = a.Special
	}
	var raw, normed []*addedToken
	for _, a := range t.addedList {
		if a.normalized {
			normed = append(normed, a)
		} else {
			raw = append(raw, a)
		}
	}
	t.addedRawM, t.addedNormM = newAddedMatcher(raw), newAddedMatcher(normed)
	return nil
}

func (t *Tokenizer) buildPostProcessor(c *componentJSON) error {
	if c == nil {
		return nil
	}
	switch c.Type {
	case "ByteLevel":
		return nil // only adjusts offsets, which this package does not report
	case "Sequence":
		for i := range c.Processors {
			if err := t.buildPostProcessor(&c.Processors[i]); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		seen := false
		for _, it := range c.Single {
			switch {
			case it.Sequence != nil:
				seen = true
			case it.SpecialToken != nil:
				sp, ok := c.SpecialTokens[it.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("%w: template names special token %q it does not define", ErrMalformed, it.SpecialToken.ID)
				}
				for _, id := range sp.IDs {
					if id < 0 || id >= len(t.tokens) {
						return fmt.Errorf("%w: template token %q has id %d outside the vocabulary", ErrMalformed, sp.ID, id)
					}
				}
				if seen {
					t.suffix = append(t.suffix, sp.IDs...)
				} else {
					t.prefix = append(t.prefix, sp.IDs...)
				}
			}
		}
		if len(t.prefix) > 0 && t.bos < 0 {
			t.bos = t.prefix[0]
		}
		return nil
	}
	return fmt.Errorf("%w: post-processor %q", ErrUnsupported, c.Type)
}

// readConfig takes bos_token and eos_token from tokenizer_config.json; each
// is a string or an AddedToken object with a content field.
func (t *Tokenizer) readConfig(data []byte) error {
	if data == nil {
		return nil
	}
	var cfg struct {
		BOS json.RawMessage `json:"bos_token"`
		EOS json.RawMessage `json:"eos_token"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("%w: tokenizer_config.json: %w", ErrMalformed, err)
	}
	for _, f := range []struct {
		raw json.RawMessage
		dst *int
	}{{cfg.BOS, &t.bos}, {cfg.EOS, &t.eos}} {
		name := configTokenName(f.raw)
		if name == "" {
			continue
		}
		id, ok := t.TokenID(name)
		if !ok {
			return fmt.Errorf("%w: tokenizer_config.json names token %q, which is not in the vocabulary", ErrMalformed, name)
		}
		*f.dst = id
	}
	return nil
}

func configTokenName(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.Content
	}
	return ""
}

// VocabSize is one more than the largest token id, added tokens included:
// the row count a model's embedding needs at least.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of an added token's content or of a vocabulary
// string (in the model's alphabet: "Ġthe" for byte-level models).
func (t *Tokenizer) TokenID(s string) (int, bool) {
	for _, a := range t.addedList {
		if a.content == s {
			return a.id, true
		}
	}
	id, ok := t.model.vocab[s]
	return id, ok
}

// Token returns the vocabulary string of id.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.tokens) || t.tokens[id] == "" {
		return "", false
	}
	return t.tokens[id], true
}

// IsSpecial reports whether id is a special added token (BOS, EOS, chat
// markers), which DecodeOptions.SkipSpecialTokens drops.
func (t *Tokenizer) IsSpecial(id int) bool { return id >= 0 && id < len(t.special) && t.special[id] }

// BOS is the beginning-of-sequence id: tokenizer_config.json's bos_token,
// else the first token the post-processor template puts before the text.
func (t *Tokenizer) BOS() (int, bool) { return t.bos, t.bos >= 0 }

// EOS is tokenizer_config.json's eos_token; models without that file take
// their stop ids from generation_config.json instead.
func (t *Tokenizer) EOS() (int, bool) { return t.eos, t.eos >= 0 }

// SpecialTokens lists the contents of the special added tokens (BOS, EOS,
// chat markers), in id order.
func (t *Tokenizer) SpecialTokens() []string {
	var out []string
	for _, a := range t.addedList {
		if a.special {
			out = append(out, a.content)
		}
	}
	return out
}
