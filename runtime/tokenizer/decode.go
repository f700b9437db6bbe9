package tokenizer

import "fmt"

// DecodeOptions selects how Decode treats special tokens.
type DecodeOptions struct {
	// SkipSpecialTokens leaves special added tokens out of the text.
	SkipSpecialTokens bool
}

// Decode returns the text of ids, special tokens included. Bytes that do
// not form valid UTF-8 become U+FFFD, as in Hugging Face. An id outside the
// vocabulary is an error wrapping ErrUnknownID.
func (t *Tokenizer) Decode(ids []int) (string, error) {
	return t.DecodeWith(ids, DecodeOptions{})
}

// DecodeWith decodes ids as opts say.
func (t *Tokenizer) DecodeWith(ids []int, opts DecodeOptions) (string, error) {
	raw := make([]byte, 0, len(ids)*4)
	first := true
	for i, id := range ids {
		if _, ok := t.Token(id); !ok {
			return "", fmt.Errorf("%w: %d at position %d (vocabulary size %d)", ErrUnknownID, id, i, len(t.tokens))
		}
		if opts.SkipSpecialTokens && t.special[id] {
			continue
		}
		raw = t.appendToken(raw, id, first)
		first = false
	}
	return string(appendLossy(nil, raw)), nil
}

// StreamDecoder turns ids into text one id at a time, as a model generates
// them, holding back bytes until they complete a UTF-8 character: a
// byte-level token can end in the middle of one (an emoji is often two or
// three tokens). The concatenation of everything Add and Flush return
// equals Decode of all the ids. Not safe for concurrent use; make one per
// sequence.
type StreamDecoder struct {
	t       *Tokenizer
	opts    DecodeOptions
	pending []byte
	first   bool
	n       int
}

// NewStreamDecoder returns a decoder that emits special tokens as text.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return t.NewStreamDecoderWith(DecodeOptions{})
}

// NewStreamDecoderWith returns a decoder with the given options.
func (t *Tokenizer) NewStreamDecoderWith(opts DecodeOptions) *StreamDecoder {
	return &StreamDecoder{t: t, opts: opts, first: true}
}

// Add decodes one more id and returns the text it completes, often "" while
// a character is still incomplete.
func (d *StreamDecoder) Add(id int) (string, error) {
	if _, ok := d.t.Token(id); !ok {
		return "", fmt.Errorf("%w: %d at stream position %d (vocabulary size %d)", ErrUnknownID, id, d.n, len(d.t.tokens))
	}
	d.n++
	if d.opts.SkipSpecialTokens && d.t.special[id] {
		return "", nil
	}
	d.pending = d.t.appendToken(d.pending, id, d.first)
	d.first = false
	keep := incompleteTail(d.pending)
	out := appendLossy(nil, d.pending[:len(d.pending)-keep])
	d.pending = append(d.pending[:0], d.pending[len(d.pending)-keep:]...)
	return string(out), nil
}

// Flush returns what is still held back (as U+FFFD: the sequence ended
// inside a character) and resets the decoder for a new sequence.
func (d *StreamDecoder) Flush() string {
	out := string(appendLossy(nil, d.pending))
	d.pending, d.first, d.n = d.pending[:0], true, 0
	return out
}

// Pending reports whether bytes of an incomplete character are held back,
// waiting for the tokens that complete it.
func (d *StreamDecoder) Pending() bool { return len(d.pending) > 0 }

// AppendTokenBytes appends the bytes id contributes to decoded output, raw
// (a byte-level token may hold part of a UTF-8 character, which Decode
// would show as U+FFFD): as the first token of a text when first is set
// (some decoders strip a leading space there), as a later one otherwise.
// It reports false for an id outside the vocabulary. Constrained decoding
// matches these bytes against a grammar.
func (t *Tokenizer) AppendTokenBytes(dst []byte, id int, first bool) ([]byte, bool) {
	if _, ok := t.Token(id); !ok {
		return dst, false
	}
	return t.appendToken(dst, id, first), true
}
