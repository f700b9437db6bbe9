package grammar

import (
	"bytes"
	"slices"
)

// Vocab is a model's vocabulary as constrained decoding reads it: each
// token's output bytes, in a trie laid out in preorder so that a walk
// skips a whole subtree (every token with a rejected prefix) by one jump.
// It is immutable and safe for concurrent use.
type Vocab struct {
	size int // logits per row: ids ≥ the tokens given are never allowed

	// token bytes: id i is buf[off[i]:off[i+1]]
	buf []byte
	off []int32

	// the trie, node 0 the root; label is the byte into a node
	label  []byte
	depth  []int32
	parent []int32
	end    []int32 // the node after the subtree
	tok    []int32 // first index into ord of the node's subtree
	own    []int32 // tokens ending at the node: ord[tok[i] : tok[i]+own[i]]
	ord    []int32 // token ids in preorder

	ends   []int32 // end-of-sequence tokens
	isEnd  map[int32]bool
	maxLen int
}

// NewVocab indexes a vocabulary: tokens[i] is the bytes token i writes
// (nil: never generated under a constraint, e.g. special tokens), size the
// width of a logits row (≥ len(tokens)), ends the tokens that end a
// generation, allowed only where the grammar may end.
func NewVocab(tokens [][]byte, size int, ends []int32) *Vocab {
	size = max(size, len(tokens))
	v := &Vocab{size: size, off: make([]int32, len(tokens)+1), isEnd: map[int32]bool{}}
	for i, t := range tokens {
		v.buf = append(v.buf, t...)
		v.off[i+1] = int32(len(v.buf))
	}
	for _, e := range ends {
		if e >= 0 && int(e) < size && !v.isEnd[e] {
			v.isEnd[e] = true
			v.ends = append(v.ends, e)
		}
	}
	var ids []int32
	for i, t := range tokens {
		if len(t) > 0 && !v.isEnd[int32(i)] {
			ids = append(ids, int32(i))
			v.maxLen = max(v.maxLen, len(t))
		}
	}
	slices.SortStableFunc(ids, func(a, b int32) int { return bytes.Compare(v.bytes(a), v.bytes(b)) })

	v.newNode(0, -1, 0)
	path := []int32{0} // node of each depth of the previous key
	var prev []byte
	for _, id := range ids {
		key := v.bytes(id)
		l := 0
		for l < len(prev) && l < len(key) && prev[l] == key[l] {
			l++
		}
		for len(path) > l+1 { // close the nodes past the common prefix
			v.end[path[len(path)-1]] = int32(len(v.label))
			path = path[:len(path)-1]
		}
		for d := l; d < len(key); d++ {
			n := v.newNode(key[d], path[len(path)-1], int32(d+1))
			path = append(path, n)
		}
		v.ord = append(v.ord, id)
		v.own[path[len(path)-1]]++
		prev = key
	}
	for _, n := range path {
		v.end[n] = int32(len(v.label))
	}
	v.tok = append(v.tok, int32(len(v.ord))) // tok[len(nodes)]: the end
	return v
}

func (v *Vocab) newNode(b byte, parent, depth int32) int32 {
	v.label = append(v.label, b)
	v.parent = append(v.parent, parent)
	v.depth = append(v.depth, depth)
	v.end = append(v.end, 0)
	v.tok = append(v.tok, int32(len(v.ord)))
	v.own = append(v.own, 0)
	return int32(len(v.label) - 1)
}

func (v *Vocab) bytes(id int32) []byte { return v.buf[v.off[id]:v.off[id+1]] }

// Size is the width of a logits row.
func (v *Vocab) Size() int { return v.size }

// Nodes is the trie's size.
func (v *Vocab) Nodes() int { return len(v.label) }

// path appends the bytes from the root to node n.
func (v *Vocab) path(dst []byte, n int32) []byte {
	d := int(v.depth[n])
	dst = slices.Grow(dst[:0], d)[:d]
	for ; n > 0; n = v.parent[n] {
		dst[v.depth[n]-1] = v.label[n]
	}
	return dst
}
