package tokenizer

// EncodeOptions selects how Encode treats special tokens.
type EncodeOptions struct {
	// AddSpecialTokens wraps the ids in the post-processor's template
	// (Llama's BOS, for instance), as Hugging Face's add_special_tokens.
	AddSpecialTokens bool
	// SplitSpecialTokens encodes special tokens written in the text as
	// plain text instead of as their ids: set it for untrusted input so a
	// user cannot inject "<|im_end|>".
	SplitSpecialTokens bool
}

// Encode returns the ids of text, recognising added and special tokens
// written in it and adding none (no BOS). It never fails: byte-level
// models cover every byte, others map unknown runes to unk or drop them as
// Hugging Face does.
func (t *Tokenizer) Encode(text string) []int {
	return t.EncodeWith(text, EncodeOptions{})
}

// EncodeWithSpecial is Encode plus the post-processor's special tokens.
func (t *Tokenizer) EncodeWithSpecial(text string) []int {
	return t.EncodeWith(text, EncodeOptions{AddSpecialTokens: true})
}

// EncodeWith encodes text as opts say.
func (t *Tokenizer) EncodeWith(text string, opts EncodeOptions) []int {
	ids := make([]int, 0, len(text)/4+len(t.prefix)+len(t.suffix)+1)
	if opts.AddSpecialTokens {
		ids = append(ids, t.prefix...)
	}
	var segs, inner []segment
	var pieces []string
	segs = t.addedRawM.split(segs, text, 0, opts.SplitSpecialTokens)
	for _, s := range segs {
		if s.tok != nil {
			ids = append(ids, s.tok.id)
			continue
		}
		norm := s.text
		if t.normalize != nil {
			norm = t.normalize(norm)
		}
		inner = t.addedNormM.split(inner[:0], norm, s.start, opts.SplitSpecialTokens)
		for _, n := range inner {
			if n.tok != nil {
				ids = append(ids, n.tok.id)
				continue
			}
			pieces = t.pre.run(pieces[:0], n.text, n.start == 0)
			for _, p := range pieces {
				ids = t.encodePiece(ids, p)
			}
		}
	}
	if opts.AddSpecialTokens {
		ids = append(ids, t.suffix...)
	}
	return ids
}

// encodePiece appends the BPE ids of one pre-tokenized piece.
func (t *Tokenizer) encodePiece(ids []int, piece string) []int {
	if piece == "" {
		return ids
	}
	m := t.model
	if m.ignoreMerges {
		if id, ok := m.wholeToken(piece); ok {
			return append(ids, id)
		}
	}
	cacheable := t.cache != nil && len(piece) <= maxCachedPiece
	if cacheable {
		if v, ok := t.cache.get(piece); ok {
			return append(ids, v...)
		}
	}
	start := len(ids)
	ids = m.symbols(ids, piece)
	merged := m.mergeWord(ids[start:])
	ids = ids[:start+len(merged)]
	if cacheable {
		t.cache.put(piece, ids[start:])
	}
	return ids
}
