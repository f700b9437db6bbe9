package grammar

import (
	"errors"
	"slices"
	"unsafe"
)

var errTooLarge = errors.New("the grammar is too large")

// Limits on what a compilation may build; past them a grammar is refused
// as too large (an untrusted schema must not take the device's memory).
const (
	maxNFAStates = 1 << 20
	maxDFAStates = 1 << 17
)

// ruleDFA is one rule determinised: bytes map to classes, a state's
// transitions are a row of next, and calls say which rules may be matched
// from a state (and where the rule goes on after them).
type ruleDFA struct {
	class  [256]uint8
	rep    []byte // a byte of each class
	nclass int
	next   []int32 // state*nclass + class → state, or -1
	accept []bool
	calls  [][]callEdge
}

func (d *ruleDFA) states() int { return len(d.accept) }

// determinise builds the DFA of the NFA from start to end by the subset
// construction; budget bounds the states it may make.
func determinise(n *nfa, start, end int32, budget int) (*ruleDFA, error) {
	d := &ruleDFA{}
	// byte classes: boundaries at each edge's ends
	var cut [257]bool
	cut[0], cut[256] = true, true
	for _, es := range n.edges {
		for _, e := range es {
			cut[e.lo] = true
			cut[int(e.hi)+1] = true
		}
	}
	c := -1
	for b := 0; b < 256; b++ {
		if cut[b] {
			c++
			d.rep = append(d.rep, byte(b))
		}
		d.class[b] = uint8(c)
	}
	d.nclass = c + 1
	nc := d.nclass

	// closure with a generation-stamped visited set
	seen := make([]uint32, n.len())
	var gen uint32
	var stack []int32
	closure := func(set []int32) []int32 {
		gen++
		stack = append(stack[:0], set...)
		out := set[:0:0]
		for _, s := range set {
			seen[s] = gen
		}
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			out = append(out, s)
			for _, t := range n.eps[s] {
				if seen[t] != gen {
					seen[t] = gen
					stack = append(stack, t)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	key := func(set []int32) string {
		if len(set) == 0 {
			return ""
		}
		return string(unsafe.Slice((*byte)(unsafe.Pointer(&set[0])), len(set)*4))
	}
	index := map[string]int32{}
	var sets [][]int32
	add := func(set []int32) (int32, error) {
		k := key(set)
		if i, ok := index[k]; ok {
			return i, nil
		}
		if len(sets) >= budget {
			return 0, errTooLarge
		}
		i := int32(len(sets))
		index[k] = i
		sets = append(sets, set)
		d.accept = append(d.accept, false)
		d.calls = append(d.calls, nil)
		d.next = append(d.next, make([]int32, nc)...)
		return i, nil
	}
	if _, err := add(closure([]int32{start})); err != nil {
		return nil, err
	}
	targets := make([][]int32, nc)
	for i := 0; i < len(sets); i++ {
		set := sets[i]
		for c := range targets {
			targets[c] = targets[c][:0]
		}
		var calls []callEdge
		for _, s := range set {
			if s == end {
				d.accept[i] = true
			}
			for _, e := range n.edges[s] {
				for c := d.class[e.lo]; ; c++ {
					targets[c] = append(targets[c], e.to)
					if c == d.class[e.hi] {
						break
					}
				}
			}
			calls = append(calls, n.calls[s]...)
		}
		row := int(i) * nc
		for c := range targets {
			t := targets[c]
			if len(t) == 0 {
				d.next[row+c] = -1
				continue
			}
			slices.Sort(t)
			t = slices.Compact(t)
			j, err := add(closure(slices.Clone(t)))
			if err != nil {
				return nil, err
			}
			d.next[row+c] = j
		}
		// one call edge per rule: the union of where its callers go on
		slices.SortFunc(calls, func(a, b callEdge) int { return int(a.rule - b.rule) })
		for k := 0; k < len(calls); {
			r := calls[k].rule
			var to []int32
			for ; k < len(calls) && calls[k].rule == r; k++ {
				to = append(to, calls[k].to)
			}
			slices.Sort(to)
			j, err := add(closure(slices.Compact(to)))
			if err != nil {
				return nil, err
			}
			d.calls[i] = append(d.calls[i], callEdge{rule: r, to: j})
		}
	}
	return d, nil
}

// byteDFA is a DFA over bytes with a full row per state (for products);
// state 0 is the start.
type byteDFA struct {
	next   []int32 // state*256 + byte → state or -1
	accept []bool
}

// toByteDFA determinises an expression without calls into a byteDFA,
// trimmed of states that cannot reach acceptance.
func toByteDFA(e expr) (*byteDFA, error) {
	n := &nfa{}
	start := n.state()
	end, err := n.build(e, start, maxNFAStates)
	if err != nil {
		return nil, err
	}
	d, err := determinise(n, start, end, maxDFAStates)
	if err != nil {
		return nil, err
	}
	out := &byteDFA{next: make([]int32, d.states()*256), accept: d.accept}
	for s := range d.accept {
		if len(d.calls[s]) > 0 {
			panic("grammar: a call inside a string automaton")
		}
		for b := range 256 {
			out.next[s*256+b] = d.next[s*d.nclass+int(d.class[b])]
		}
	}
	return out.trim(), nil
}

// trim removes the states from which no accepting state can be reached
// (keeping the start); an empty language leaves a start with no moves.
func (d *byteDFA) trim() *byteDFA {
	n := len(d.accept)
	live := make([]bool, n)
	changed := true
	for changed {
		changed = false
		for s := range n {
			if live[s] {
				continue
			}
			if d.accept[s] {
				live[s], changed = true, true
				continue
			}
			for _, t := range d.next[s*256 : s*256+256] {
				if t >= 0 && live[t] {
					live[s], changed = true, true
					break
				}
			}
		}
	}
	for i, t := range d.next {
		if t >= 0 && !live[t] {
			d.next[i] = -1
		}
	}
	return d
}

// empty reports whether the DFA accepts nothing.
func (d *byteDFA) isEmpty() bool {
	if d.accept[0] {
		return false
	}
	for _, t := range d.next[:256] {
		if t >= 0 {
			return false
		}
	}
	return true
}

// intersect is the product of two DFAs: what both accept.
func intersect(a, b *byteDFA) (*byteDFA, error) {
	type pair struct{ x, y int32 }
	index := map[pair]int32{{0, 0}: 0}
	queue := []pair{{0, 0}}
	out := &byteDFA{}
	for i := 0; i < len(queue); i++ {
		p := queue[i]
		out.accept = append(out.accept, a.accept[p.x] && b.accept[p.y])
		row := make([]int32, 256)
		for c := range 256 {
			x, y := a.next[int(p.x)*256+c], b.next[int(p.y)*256+c]
			if x < 0 || y < 0 {
				row[c] = -1
				continue
			}
			q := pair{x, y}
			j, ok := index[q]
			if !ok {
				if len(queue) >= maxDFAStates {
					return nil, errTooLarge
				}
				j = int32(len(queue))
				index[q] = j
				queue = append(queue, q)
			}
			row[c] = j
		}
		out.next = append(out.next, row...)
	}
	return out.trim(), nil
}
