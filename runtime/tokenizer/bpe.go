package tokenizer

import (
	"fmt"
	"unicode/utf8"
)

// bpe is the BPE model: vocabulary, merge ranks and the rules that turn a
// pre-tokenized piece into its first symbols. Read-only after load.
type bpe struct {
	vocab     map[string]int // vocabulary string -> id
	idToToken []string       // id -> vocabulary string ("" for holes)
	merges    map[uint64]merge

	// byteLevel pieces arrive as raw bytes (the ByteLevel pre-tokenizer's
	// alphabet is applied implicitly): byteID maps each byte to its id and
	// rawVocab keys the vocabulary by the bytes a token stands for.
	byteLevel bool
	byteID    [256]int
	rawVocab  map[string]int

	ignoreMerges bool
	byteFallback bool
	fallbackID   [256]int // <0xXX> ids when byteFallback
	unkID        int      // -1 when there is no unk token
	fuseUnk      bool
}

// maxSparseID bounds ids so that a hostile file cannot make Parse allocate
// gigabytes for a few entries: vocabularies may have holes, not vast ones.
func maxSparseID(entries int) int { return 2*entries + 1024 }

type merge struct {
	rank int32
	id   int32
}

func pairKey(a, b int) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func newBPE(m *bpeModelJSON, byteLevel bool) (*bpe, error) {
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("%w: BPE dropout %v", ErrUnsupported, *m.Dropout)
	}
	if p := m.ContinuingSubwordPrefix; p != nil && *p != "" {
		return nil, fmt.Errorf("%w: BPE continuing_subword_prefix %q", ErrUnsupported, *p)
	}
	if p := m.EndOfWordSuffix; p != nil && *p != "" {
		return nil, fmt.Errorf("%w: BPE end_of_word_suffix %q", ErrUnsupported, *p)
	}
	b := &bpe{
		vocab:        m.Vocab,
		byteLevel:    byteLevel,
		ignoreMerges: m.IgnoreMerges,
		byteFallback: m.ByteFallback,
		fuseUnk:      m.FuseUnk,
		unkID:        -1,
	}
	if b.vocab == nil {
		b.vocab = map[string]int{}
	}
	maxID := -1
	for tok, id := range b.vocab {
		if id < 0 || id > maxSparseID(len(b.vocab)) {
			return nil, fmt.Errorf("%w: token %q has id %d", ErrMalformed, tok, id)
		}
		maxID = max(maxID, id)
	}
	b.idToToken = make([]string, maxID+1)
	for tok, id := range b.vocab {
		if b.idToToken[id] != "" {
			return nil, fmt.Errorf("%w: id %d used by %q and %q", ErrMalformed, id, b.idToToken[id], tok)
		}
		b.idToToken[id] = tok
	}
	if m.UnkToken != nil {
		id, ok := b.vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("%w: unk_token %q is not in the vocabulary", ErrMalformed, *m.UnkToken)
		}
		b.unkID = id
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	b.merges = make(map[uint64]merge, len(merges))
	for rank, mg := range merges {
		a, okA := b.vocab[mg[0]]
		c, okC := b.vocab[mg[1]]
		id, okID := b.vocab[mg[0]+mg[1]]
		if !okA || !okC || !okID {
			return nil, fmt.Errorf("%w: merge %d (%q %q) uses a token missing from the vocabulary", ErrMalformed, rank, mg[0], mg[1])
		}
		k := pairKey(a, c)
		if _, dup := b.merges[k]; !dup { // the first (lowest) rank wins
			b.merges[k] = merge{rank: int32(rank), id: int32(id)}
		}
	}
	if byteLevel {
		b.rawVocab = make(map[string]int, len(b.vocab))
		for tok, id := range b.vocab {
			raw, ok := byteLevelBytes(tok)
			if ok {
				b.rawVocab[string(raw)] = id
			}
		}
		for c := 0; c < 256; c++ {
			id, ok := b.vocab[string(byteToRune[c])]
			if !ok {
				id = b.unkID
			}
			b.byteID[c] = id
		}
	}
	if b.byteFallback {
		for c := 0; c < 256; c++ {
			id, ok := b.vocab[fmt.Sprintf("<0x%02X>", c)]
			if !ok {
				return nil, fmt.Errorf("%w: byte_fallback is set but <0x%02X> is not in the vocabulary", ErrMalformed, c)
			}
			b.fallbackID[c] = id
		}
	}
	return b, nil
}

// byteLevelBytes is byteLevelDecode that reports whether every rune was in
// the alphabet.
func byteLevelBytes(tok string) ([]byte, bool) {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		c, ok := runeToByte[r]
		if !ok {
			return nil, false
		}
		out = append(out, c)
	}
	return out, true
}

// symbols appends the initial symbol ids of piece to dst.
func (b *bpe) symbols(dst []int, piece string) []int {
	if b.byteLevel {
		for i := 0; i < len(piece); i++ {
			if id := b.byteID[piece[i]]; id >= 0 {
				dst = append(dst, id)
			}
		}
		return dst
	}
	lastUnk := false
	for i, r := range piece {
		n := utf8.RuneLen(r)
		if r == utf8.RuneError {
			_, n = utf8.DecodeRuneInString(piece[i:])
		}
		ch := piece[i : i+n]
		if id, ok := b.vocab[ch]; ok {
			dst, lastUnk = append(dst, id), false
			continue
		}
		if b.byteFallback {
			for j := 0; j < len(ch); j++ {
				dst = append(dst, b.fallbackID[ch[j]])
			}
			lastUnk = false
			continue
		}
		if b.unkID >= 0 && !(b.fuseUnk && lastUnk) {
			dst = append(dst, b.unkID)
		}
		lastUnk = b.unkID >= 0
	}
	return dst
}

// wholeToken returns the id of piece when it is one vocabulary entry, for
// ignore_merges models.
func (b *bpe) wholeToken(piece string) (int, bool) {
	if b.byteLevel {
		id, ok := b.rawVocab[piece]
		return id, ok
	}
	id, ok := b.vocab[piece]
	return id, ok
}

// symbol is one node of the doubly linked list a word is merged in.
type symbol struct {
	id, prev, next int32
	gone           bool
}

// candidate is a possible merge of the symbol at pos with its successor.
type candidate struct {
	rank, pos, id int32
}

// mergeWord applies the merges to ids in rank order, leftmost first on
// ties, exactly as Hugging Face's BPE::merge_word does (including its rule
// that a stale queue entry is recognised by the merged id no longer
// matching), and returns the result in ids' storage.
func (b *bpe) mergeWord(ids []int) []int {
	if len(ids) < 2 {
		return ids
	}
	// Words are short: keep their working state on the stack.
	var symBuf [32]symbol
	var heapBuf [64]candidate
	syms := symBuf[:0]
	if len(ids) > len(symBuf) {
		syms = make([]symbol, 0, len(ids))
	}
	syms = syms[:len(ids)]
	for i, id := range ids {
		syms[i] = symbol{id: int32(id), prev: int32(i - 1), next: int32(i + 1)}
	}
	syms[len(syms)-1].next = -1
	h := mergeHeap(heapBuf[:0])
	for i := 0; i+1 < len(ids); i++ {
		if m, ok := b.merges[pairKey(ids[i], ids[i+1])]; ok {
			h = h.push(candidate{rank: m.rank, pos: int32(i), id: m.id})
		}
	}
	for len(h) > 0 {
		var top candidate
		top, h = h.pop()
		s := &syms[top.pos]
		if s.gone || s.next < 0 {
			continue
		}
		right := &syms[s.next]
		if m, ok := b.merges[pairKey(int(s.id), int(right.id))]; !ok || m.id != top.id {
			continue
		}
		s.id = top.id
		right.gone = true
		s.next = right.next
		if s.next >= 0 {
			syms[s.next].prev = top.pos
			if m, ok := b.merges[pairKey(int(s.id), int(syms[s.next].id))]; ok {
				h = h.push(candidate{rank: m.rank, pos: top.pos, id: m.id})
			}
		}
		if s.prev >= 0 {
			if m, ok := b.merges[pairKey(int(syms[s.prev].id), int(s.id))]; ok {
				h = h.push(candidate{rank: m.rank, pos: s.prev, id: m.id})
			}
		}
	}
	out := ids[:0]
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, int(syms[i].id))
	}
	return out
}

// mergeHeap is a binary min-heap on (rank, pos), hand-written because
// container/heap's interface calls cost more than the merges on short words;
// push and pop return the slice so a caller's stack buffer stays on the stack.
type mergeHeap []candidate

func (h mergeHeap) less(i, j int) bool {
	return h[i].rank < h[j].rank || h[i].rank == h[j].rank && h[i].pos < h[j].pos
}

func (h mergeHeap) push(c candidate) mergeHeap {
	h = append(h, c)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func (h mergeHeap) pop() (candidate, mergeHeap) {
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return top, h
}
