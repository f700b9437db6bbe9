package grammar

// The character-level matcher. A match in progress is a small set of
// stacks (a rule may be entered by a call from several places, and two
// alternatives may call different rules); each stack is a top position
// (rule, state) over immutable frames shared between stacks and between
// copies, so copying a matcher's state copies its tops only.

// maxDepth bounds the nesting of rule calls (JSON nesting of a recursive
// schema or of plain JSON); deeper matches are not generated.
const maxDepth = 64

// maxStacks bounds how many alternative stacks a match keeps.
const maxStacks = 32

// frame is a return point: the rule and the state it goes on at once the
// rule called above it ends.
type frame struct {
	rule, state int32
	depth       int32
	total       int32 // dist of this frame plus those below
	below       *frame
}

// pos is the top of a stack.
type pos struct {
	rule, state int32
	below       *frame
}

// arena allocates the frames of a mask computation, all dropped at once;
// a nil arena allocates each on the heap (frames a matcher keeps).
type arena struct {
	chunks [][]frame
	chunk  int
	used   int
}

const arenaChunk = 256

func (a *arena) frame() *frame {
	if a == nil {
		return new(frame)
	}
	if a.chunk == len(a.chunks) {
		a.chunks = append(a.chunks, make([]frame, arenaChunk))
	}
	f := &a.chunks[a.chunk][a.used]
	if a.used++; a.used == arenaChunk {
		a.chunk, a.used = a.chunk+1, 0
	}
	return f
}

func (a *arena) reset() { a.chunk, a.used = 0, 0 }

func (g *Grammar) dist(p pos) int32 {
	d := g.rules[p.rule].dist[p.state]
	if p.below != nil {
		d += p.below.total
	}
	return d
}

func (g *Grammar) push(a *arena, rule, state int32, below *frame) *frame {
	f := a.frame()
	*f = frame{rule: rule, state: state, below: below, total: g.rules[rule].dist[state]}
	if below != nil {
		f.depth, f.total = below.depth+1, f.total+below.total
	}
	return f
}

func contains(ps []pos, p pos) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// closure appends to out every position reachable from in without reading
// a byte (entering called rules, returning from ended ones), and reports
// whether the whole grammar may end there.
func (g *Grammar) closure(a *arena, in, out []pos) ([]pos, bool) {
	end := false
	var visit func(p pos)
	visit = func(p pos) {
		if contains(out, p) || len(out) >= 4*maxStacks {
			return
		}
		out = append(out, p)
		r := g.rules[p.rule]
		if r.accept[p.state] {
			if p.below == nil {
				end = true
			} else {
				f := p.below
				visit(pos{f.rule, f.state, f.below})
			}
		}
		if p.below != nil && p.below.depth >= maxDepth-1 {
			return
		}
		for _, c := range r.calls[p.state] {
			visit(pos{c.rule, 0, g.push(a, p.rule, c.to, p.below)})
		}
	}
	for _, p := range in {
		visit(p)
	}
	return out, end
}

// step appends to out the positions in closed (a closure) after byte b.
func (g *Grammar) stepClosed(closed []pos, b byte, out []pos) []pos {
	for _, p := range closed {
		r := g.rules[p.rule]
		if t := r.next[int(p.state)*r.nclass+int(r.class[b])]; t >= 0 {
			q := pos{p.rule, t, p.below}
			if !contains(out, q) && len(out) < maxStacks {
				out = append(out, q)
			}
		}
	}
	return out
}

// stepper advances position sets by bytes, with scratch space reused.
type stepper struct {
	g       *Grammar
	a       *arena
	scratch []pos
}

// step sets out to the positions of in after byte b. A single position
// inside a rule (neither ending nor calling) takes the DFA's move alone:
// the common case, and no allocation.
func (s *stepper) step(in []pos, b byte, out []pos) []pos {
	out = out[:0]
	if len(in) == 1 {
		p := in[0]
		r := s.g.rules[p.rule]
		if !r.branch[p.state] {
			if t := r.next[int(p.state)*r.nclass+int(r.class[b])]; t >= 0 {
				out = append(out, pos{p.rule, t, p.below})
			}
			return out
		}
	}
	s.scratch, _ = s.g.closure(s.a, in, s.scratch[:0])
	return s.g.stepClosed(s.scratch, b, out)
}

// canEnd reports whether the grammar may end at in.
func (s *stepper) canEnd(in []pos) bool {
	var end bool
	s.scratch, end = s.g.closure(s.a, in, s.scratch[:0])
	return end
}

// minDist is the fewest bytes that complete a match from in.
func (g *Grammar) minDist(in []pos) int32 {
	d := int32(inf)
	for _, p := range in {
		d = min(d, g.dist(p))
	}
	return d
}

// Matcher follows a text through the grammar byte by byte. Copy it with
// Clone (cheap: the stacks are shared).
type Matcher struct {
	s   stepper
	cur []pos
	buf []pos
}

// NewMatcher starts a match at the beginning of the output.
func (g *Grammar) NewMatcher() *Matcher {
	return &Matcher{s: stepper{g: g}, cur: []pos{{0, 0, nil}}}
}

// Clone returns an independent copy of the match so far.
func (m *Matcher) Clone() *Matcher {
	return &Matcher{s: stepper{g: m.s.g}, cur: append([]pos(nil), m.cur...)}
}

// Feed reads text; it reports false, and keeps its state, when the text
// cannot continue the match.
func (m *Matcher) Feed(text []byte) bool {
	cur := append(m.buf[:0], m.cur...)
	var next []pos
	for _, b := range text {
		next = m.s.step(cur, b, next)
		if len(next) == 0 {
			return false
		}
		cur, next = next, cur
	}
	m.cur, m.buf = cur, m.cur[:0]
	return true
}

// CanEnd reports whether the text so far is a complete match.
func (m *Matcher) CanEnd() bool { return m.s.canEnd(m.cur) }

// Remaining is the fewest bytes that complete the match.
func (m *Matcher) Remaining() int { return int(m.s.g.minDist(m.cur)) }

// Match reports whether the grammar matches text as a whole.
func (g *Grammar) Match(text string) bool {
	m := g.NewMatcher()
	return m.Feed([]byte(text)) && m.CanEnd()
}
