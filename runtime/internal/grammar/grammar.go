package grammar

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
)

// Grammar is a compiled constraint: rules, each a DFA over bytes whose
// states may also call other rules (recursion), rule 0 being the whole
// output. It is immutable and safe for concurrent use.
type Grammar struct {
	desc  string
	rules []*rule
}

type rule struct {
	name string
	*ruleDFA
	// dist is the fewest bytes from a state to the rule's end (calls
	// counted at their rule's shortest match); unreachable states are
	// pruned, so every state left can end.
	dist []int32
	// branch marks the states where a match may leave the DFA's own
	// moves: accepting (return to the caller) or calling a rule.
	branch []bool
}

// String describes the grammar ("json schema", "json", "regex").
func (g *Grammar) String() string { return g.desc }

// Rules is the number of rules; States the DFA states of them all.
func (g *Grammar) Rules() int { return len(g.rules) }

// States is the number of DFA states of all rules.
func (g *Grammar) States() int {
	n := 0
	for _, r := range g.rules {
		n += r.states()
	}
	return n
}

const inf = math.MaxInt32 / 4

// builder collects rule bodies and compiles them.
type builder struct {
	names  []string
	bodies []expr
}

func (b *builder) rule(name string) int {
	b.names = append(b.names, name)
	b.bodies = append(b.bodies, nil)
	return len(b.names) - 1
}

// ErrTooLarge reports a grammar past the compiler's size limits.
var ErrTooLarge = errors.New("too large to compile (simplify it)")

func (b *builder) finish(desc string) (*Grammar, error) {
	g := &Grammar{desc: desc}
	nfaLeft, dfaLeft := maxNFAStates, maxDFAStates
	for i, body := range b.bodies {
		n := &nfa{}
		start := n.state()
		end, err := n.build(body, start, nfaLeft)
		if err != nil {
			return nil, ErrTooLarge
		}
		nfaLeft -= n.len()
		d, err := determinise(n, start, end, dfaLeft)
		if err != nil {
			return nil, ErrTooLarge
		}
		dfaLeft -= d.states()
		g.rules = append(g.rules, &rule{name: b.names[i], ruleDFA: d})
	}
	g.distances()
	if g.rules[0].dist[0] >= inf {
		return nil, errors.New("nothing can be generated that matches it")
	}
	return g, nil
}

// distances computes each state's distance to its rule's end, then prunes
// the moves into states (and calls into rules) that cannot end.
func (g *Grammar) distances() {
	minLen := make([]int32, len(g.rules))
	for i := range minLen {
		minLen[i] = inf
	}
	type rev struct {
		from int32
		rule int32 // -1: a byte move
	}
	revs := make([][][]rev, len(g.rules))
	for i, r := range g.rules {
		rv := make([][]rev, r.states())
		for s := range r.states() {
			for c := range r.nclass {
				if t := r.next[s*r.nclass+c]; t >= 0 {
					if l := len(rv[t]); l == 0 || rv[t][l-1] != (rev{int32(s), -1}) {
						rv[t] = append(rv[t], rev{int32(s), -1})
					}
				}
			}
			for _, ce := range r.calls[s] {
				rv[ce.to] = append(rv[ce.to], rev{int32(s), ce.rule})
			}
		}
		revs[i] = rv
		r.dist = make([]int32, r.states())
	}
	for changed := true; changed; {
		changed = false
		for i, r := range g.rules {
			for s := range r.dist {
				r.dist[s] = inf
			}
			h := &distHeap{}
			for s, a := range r.accept {
				if a {
					r.dist[s] = 0
					heap.Push(h, distItem{int32(s), 0})
				}
			}
			for h.Len() > 0 {
				it := heap.Pop(h).(distItem)
				if it.d > r.dist[it.s] {
					continue
				}
				for _, e := range revs[i][it.s] {
					w := int32(1)
					if e.rule >= 0 {
						w = minLen[e.rule]
					}
					if nd := it.d + w; nd < r.dist[e.from] && nd < inf {
						r.dist[e.from] = nd
						heap.Push(h, distItem{e.from, nd})
					}
				}
			}
			if r.dist[0] != minLen[i] {
				minLen[i], changed = r.dist[0], true
			}
		}
	}
	for _, r := range g.rules {
		r.branch = make([]bool, r.states())
		for s := range r.states() {
			row := r.next[s*r.nclass : (s+1)*r.nclass]
			for c, t := range row {
				if t >= 0 && r.dist[t] >= inf {
					row[c] = -1
				}
			}
			calls := r.calls[s][:0]
			for _, ce := range r.calls[s] {
				if minLen[ce.rule] < inf && r.dist[ce.to] < inf {
					calls = append(calls, ce)
				}
			}
			r.calls[s] = calls
			r.branch[s] = r.accept[s] || len(calls) > 0
		}
	}
}

type distItem struct {
	s int32
	d int32
}

type distHeap []distItem

func (h distHeap) Len() int           { return len(h) }
func (h distHeap) Less(i, j int) bool { return h[i].d < h[j].d }
func (h distHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *distHeap) Push(x any)        { *h = append(*h, x.(distItem)) }
func (h *distHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Regex compiles a regular expression (Go's RE2 syntax, which ECMAScript
// patterns without lookaround or backreferences also are) that the whole
// output must match.
func Regex(pattern string) (*Grammar, error) {
	e, err := compileRegex(pattern, regexOpts{})
	if err != nil {
		return nil, fmt.Errorf("regex: %w", err)
	}
	b := &builder{}
	b.bodies = append(b.bodies, nil)
	b.names = append(b.names, "regex")
	b.bodies[0] = e
	g, err := b.finish("regex")
	if err != nil {
		return nil, fmt.Errorf("regex: pattern %q: %w", pattern, err)
	}
	return g, nil
}

// JSON compiles plain JSON: one JSON object, written compactly (no
// whitespace outside strings), as OpenAI's json_object mode answers.
func JSON() *Grammar {
	b := &builder{}
	root := b.rule("object")
	value := jsonValueRule(b)
	b.bodies[root] = jsonObject(value)
	g, err := b.finish("json")
	if err != nil {
		panic(err)
	}
	return g
}
