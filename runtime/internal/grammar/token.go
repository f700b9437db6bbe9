package grammar

import (
	"math/bits"
	"sync"
)

// TokenGrammar is a grammar over a vocabulary: it says which tokens may
// come next. What a token does inside one rule's DFA does not depend on
// the stack below, so for each (rule, state) a walk of the vocabulary
// trie is done once and kept: the tokens the DFA reads whole (allowed
// wherever that state is on top), and the subtrees of tokens that leave
// the rule (return to the caller or enter a callee) before the DFA would
// reject them, which are walked again with the actual stacks at each mask.
//
// A TokenGrammar is safe for concurrent use; the masks it keeps grow with
// the states generations visit.
type TokenGrammar struct {
	g *Grammar
	v *Vocab

	mu    sync.Mutex
	cache [][]*entry // by rule, by state
}

// entry is what a state's DFA does with the vocabulary.
type entry struct {
	dense  []uint64 // the tokens read whole, as a bitset, or
	sparse []int32  // as a list (the smaller)
	maxEnd int32    // the largest rule distance after such a token
	minEnd int32    // and the smallest
	leave  []int32  // trie nodes whose subtrees need the stack
}

// NewTokenGrammar pairs a grammar with a vocabulary.
func NewTokenGrammar(g *Grammar, v *Vocab) *TokenGrammar {
	tg := &TokenGrammar{g: g, v: v, cache: make([][]*entry, len(g.rules))}
	for i, r := range g.rules {
		tg.cache[i] = make([]*entry, r.states())
	}
	return tg
}

// Grammar is the grammar.
func (tg *TokenGrammar) Grammar() *Grammar { return tg.g }

// Vocab is the vocabulary.
func (tg *TokenGrammar) Vocab() *Vocab { return tg.v }

func (tg *TokenGrammar) entry(rule, state int32) *entry {
	tg.mu.Lock()
	e := tg.cache[rule][state]
	tg.mu.Unlock()
	if e != nil {
		return e
	}
	e = tg.walkRule(rule, state)
	tg.mu.Lock()
	tg.cache[rule][state] = e
	tg.mu.Unlock()
	return e
}

// walkRule walks the trie with one rule's DFA from state.
func (tg *TokenGrammar) walkRule(rule, state int32) *entry {
	v, r := tg.v, tg.g.rules[rule]
	e := &entry{minEnd: inf}
	n := len(v.label)
	st := make([]int32, 1, 64)
	br := make([]bool, 1, 64)
	st[0], br[0] = state, r.branch[state]
	var list []int32
	for i := 1; i < n; {
		d := v.depth[i]
		if int(d) >= len(st) {
			st = append(st, 0)
			br = append(br, false)
		}
		ps, pb := st[d-1], br[d-1]
		t := r.next[int(ps)*r.nclass+int(r.class[v.label[i]])]
		if t < 0 {
			if pb {
				e.leave = append(e.leave, int32(i))
			}
			i = int(v.end[i])
			continue
		}
		st[d], br[d] = t, pb || r.branch[t]
		if k := v.own[i]; k > 0 {
			list = append(list, v.ord[v.tok[i]:v.tok[i]+k]...)
			e.maxEnd = max(e.maxEnd, r.dist[t])
			e.minEnd = min(e.minEnd, r.dist[t])
		}
		i++
	}
	if len(list)*32 > v.size {
		e.dense = make([]uint64, (v.size+63)/64)
		for _, id := range list {
			e.dense[id>>6] |= 1 << (id & 63)
		}
	} else {
		e.sparse = list
	}
	return e
}

// walkRuleLimit adds to dst the tokens the rule's DFA reads whole from
// state and after which the rule's distance is at most lim.
func (tg *TokenGrammar) walkRuleLimit(dst []uint64, rule, state, lim int32) {
	v, r := tg.v, tg.g.rules[rule]
	n := len(v.label)
	var st [256]int32
	st[0] = state
	for i := 1; i < n; {
		d := v.depth[i]
		if int(d) >= len(st) {
			i = int(v.end[i])
			continue
		}
		t := r.next[int(st[d-1])*r.nclass+int(r.class[v.label[i]])]
		if t < 0 {
			i = int(v.end[i])
			continue
		}
		st[d] = t
		if k := v.own[i]; k > 0 && r.dist[t] <= lim {
			for _, id := range v.ord[v.tok[i] : v.tok[i]+k] {
				dst[id>>6] |= 1 << (id & 63)
			}
		}
		i++
	}
}

// TokenMatcher is one generation's progress through a TokenGrammar.
// It is not safe for concurrent use.
type TokenMatcher struct {
	tg    *TokenGrammar
	cur   []pos
	ended bool
	n     int // tokens accepted

	// scratch for masks
	s     stepper
	a     arena
	at    [][]pos // positions at each trie depth
	path  []byte
	one   []pos
	feedA []pos
	feedB []pos
}

// NewMatcher starts a generation.
func (tg *TokenGrammar) NewMatcher() *TokenMatcher {
	m := &TokenMatcher{tg: tg, cur: []pos{{0, 0, nil}}}
	m.s = stepper{g: tg.g, a: &m.a}
	return m
}

// Clone is an independent copy of the matcher's progress.
func (m *TokenMatcher) Clone() *TokenMatcher {
	c := m.tg.NewMatcher()
	c.cur = append(c.cur[:0], m.cur...)
	c.ended, c.n = m.ended, m.n
	return c
}

// Ended reports whether an end token was accepted.
func (m *TokenMatcher) Ended() bool { return m.ended }

// CanEnd reports whether the output so far is complete.
func (m *TokenMatcher) CanEnd() bool {
	st := stepper{g: m.tg.g}
	return !m.ended && st.canEnd(m.cur)
}

// Remaining is the fewest bytes that complete the output.
func (m *TokenMatcher) Remaining() int { return int(m.tg.g.minDist(m.cur)) }

// Accept advances past token id; it reports false, changing nothing, when
// the grammar does not allow the token here.
func (m *TokenMatcher) Accept(id int32) bool {
	v := m.tg.v
	if m.ended || id < 0 || int(id) >= v.size {
		return false
	}
	if v.isEnd[id] {
		if !m.CanEnd() {
			return false
		}
		m.ended = true
		m.n++
		return true
	}
	if int(id) >= len(v.off)-1 || v.off[id] == v.off[id+1] {
		return false
	}
	st := stepper{g: m.tg.g} // frames kept: on the heap
	cur := append(m.feedA[:0], m.cur...)
	next := m.feedB[:0]
	for _, b := range v.bytes(id) {
		next = st.step(cur, b, next)
		if len(next) == 0 {
			return false
		}
		cur, next = next, cur
	}
	m.feedA, m.feedB = m.cur[:0], next[:0]
	m.cur = cur
	m.n++
	return true
}

// Mask sets dst (a bitset of Vocab.Size bits) to the tokens allowed next
// and returns how many there are. remaining, when positive, is how many
// tokens may still be generated counting this one (max_tokens and the
// context): a token is then allowed only if the output can still be
// completed in the tokens left after it, one byte per token at worst,
// with one more left for the end token — so the vocabulary must hold every
// byte as a token of its own for that to hold (byte-level and
// byte-fallback vocabularies do). When no token fits the budget and the
// output cannot end here, the mask is the one without the budget.
func (m *TokenMatcher) Mask(dst []uint64, remaining int) int {
	clear(dst)
	if m.ended {
		return 0
	}
	m.a.reset()
	limit := int32(-1)
	if remaining > 0 {
		limit = int32(max(remaining-2, 0))
	}
	for _, p := range m.cur {
		m.maskFrom(dst, p, limit)
	}
	n := count(dst)
	end := m.s.canEnd(m.cur)
	if n == 0 && limit >= 0 && !end {
		for _, p := range m.cur {
			m.maskFrom(dst, p, -1)
		}
		n = count(dst)
	}
	if end {
		for _, id := range m.tg.v.ends {
			if dst[id>>6]&(1<<(id&63)) == 0 {
				dst[id>>6] |= 1 << (id & 63)
				n++
			}
		}
	}
	return n
}

func count(b []uint64) int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

// maskFrom adds the tokens allowed from one stack top; limit ≥ 0 keeps
// those after which the output can be completed in limit bytes.
func (m *TokenMatcher) maskFrom(dst []uint64, p pos, limit int32) {
	e := m.tg.entry(p.rule, p.state)
	var below int32
	if p.below != nil {
		below = p.below.total
	}
	switch {
	case limit >= 0 && e.minEnd+below > limit:
		// no token read whole fits the budget
	case limit >= 0 && e.maxEnd+below > limit:
		// near the budget's end: those that fit, by a walk of the rule
		m.tg.walkRuleLimit(dst, p.rule, p.state, limit-below)
	case e.dense != nil:
		for i, w := range e.dense {
			dst[i] |= w
		}
	default:
		for _, id := range e.sparse {
			dst[id>>6] |= 1 << (id & 63)
		}
	}
	v := m.tg.v
	for _, u := range e.leave {
		m.path = v.path(m.path, u)
		cur := m.ensure(0)
		cur = append(cur[:0], p)
		m.at[0] = cur
		ok := true
		for i, b := range m.path {
			next := m.ensure(i + 1)
			m.at[i+1] = m.s.step(m.at[i], b, next)
			if len(m.at[i+1]) == 0 {
				ok = false
				break
			}
		}
		if ok {
			m.walk(dst, m.at[len(m.path)], u, limit)
		}
	}
}

func (m *TokenMatcher) ensure(d int) []pos {
	for len(m.at) <= d {
		m.at = append(m.at, make([]pos, 0, 4))
	}
	return m.at[d]
}

// walk adds the tokens of node's subtree allowed from in, the positions
// after node's bytes (for the root: the positions now).
func (m *TokenMatcher) walk(dst []uint64, in []pos, node int32, limit int32) {
	v, g := m.tg.v, m.tg.g
	base := v.depth[node]
	m.ensure(int(base))
	m.at[base] = append(m.at[base][:0], in...)
	allow := func(i int32, at []pos) {
		if k := v.own[i]; k > 0 && (limit < 0 || g.minDist(at) <= limit) {
			for _, id := range v.ord[v.tok[i] : v.tok[i]+k] {
				dst[id>>6] |= 1 << (id & 63)
			}
		}
	}
	if node > 0 {
		allow(node, m.at[base])
	}
	for i := node + 1; i < v.end[node]; {
		d := v.depth[i]
		next := m.ensure(int(d))
		m.at[d] = m.s.step(m.at[d-1], v.label[i], next)
		if len(m.at[d]) == 0 {
			i = v.end[i]
			continue
		}
		allow(i, m.at[d])
		i++
	}
}

// Tokens is the number of tokens accepted so far.
func (m *TokenMatcher) Tokens() int { return m.n }
