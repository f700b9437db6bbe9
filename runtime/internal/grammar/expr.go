package grammar

// An expr is a grammar expression over bytes, built by the compilers
// (JSON Schema, JSON, regular expressions) and turned into an NFA per rule.
// Exprs are trees; one may be instantiated several times (a bounded
// repetition), so nothing in them refers to NFA states.
type expr interface{ size() int }

type (
	// eBytes matches one byte in any of its ranges.
	eBytes []byteRange
	// eLit matches a fixed byte string.
	eLit string
	// eSeq matches its parts one after the other; empty matches "".
	eSeq []expr
	// eAlt matches any of its parts; empty matches nothing.
	eAlt []expr
	// eRep matches x between min and max times (max < 0: unbounded).
	eRep struct {
		x        expr
		min, max int
	}
	// eCall matches rule by a call (a recursive reference).
	eCall int
	// eDFA matches what a byte DFA accepts (an intersection's result).
	eDFA struct{ d *byteDFA }
)

type byteRange struct{ lo, hi byte }

func (e eBytes) size() int { return 2 }
func (e eLit) size() int   { return len(e) + 1 }
func (e eSeq) size() int {
	n := 1
	for _, x := range e {
		n += x.size()
	}
	return n
}
func (e eAlt) size() int {
	n := 2
	for _, x := range e {
		n += x.size()
	}
	return n
}
func (e eRep) size() int {
	k := e.max
	if k < 0 {
		k = max(e.min, 1)
	}
	return 2 + k*e.x.size()
}
func (e eCall) size() int { return 2 }
func (e eDFA) size() int  { return len(e.d.accept) + 1 }

// none matches nothing.
var none = eAlt(nil)

// empty matches the empty string.
var empty = eSeq(nil)

func isNone(e expr) bool { a, ok := e.(eAlt); return ok && len(a) == 0 }

func seq(xs ...expr) expr {
	out := eSeq{}
	for _, x := range xs {
		if isNone(x) {
			return none
		}
		if s, ok := x.(eSeq); ok {
			out = append(out, s...)
			continue
		}
		out = append(out, x)
	}
	if len(out) == 1 {
		return out[0]
	}
	return out
}

func alt(xs ...expr) expr {
	out := eAlt{}
	for _, x := range xs {
		if a, ok := x.(eAlt); ok {
			out = append(out, a...)
			continue
		}
		out = append(out, x)
	}
	if len(out) == 1 {
		return out[0]
	}
	return out
}

func rep(x expr, lo, hi int) expr {
	if isNone(x) {
		if lo == 0 {
			return empty
		}
		return none
	}
	if hi == 0 {
		return empty
	}
	if lo == 1 && hi == 1 {
		return x
	}
	return eRep{x: x, min: lo, max: hi}
}

func opt(x expr) expr { return rep(x, 0, 1) }

func byteIn(lo, hi byte) expr { return eBytes{{lo, hi}} }

// nfa is a Thompson NFA over bytes with ε moves and call edges.
type nfa struct {
	eps   [][]int32
	edges [][]nfaEdge
	calls [][]callEdge
}

type nfaEdge struct {
	lo, hi byte
	to     int32
}

// callEdge says: match the rule, then go on at to.
type callEdge struct {
	rule int32
	to   int32
}

func (n *nfa) state() int32 {
	n.eps = append(n.eps, nil)
	n.edges = append(n.edges, nil)
	n.calls = append(n.calls, nil)
	return int32(len(n.eps) - 1)
}

func (n *nfa) len() int { return len(n.eps) }

// build adds e between from and a new state it returns.
func (n *nfa) build(e expr, from int32, limit int) (int32, error) {
	if n.len() > limit {
		return 0, errTooLarge
	}
	switch e := e.(type) {
	case eBytes:
		to := n.state()
		for _, r := range e {
			n.edges[from] = append(n.edges[from], nfaEdge{r.lo, r.hi, to})
		}
		return to, nil
	case eLit:
		cur := from
		for i := 0; i < len(e); i++ {
			to := n.state()
			n.edges[cur] = append(n.edges[cur], nfaEdge{e[i], e[i], to})
			cur = to
		}
		return cur, nil
	case eSeq:
		cur := from
		for _, x := range e {
			var err error
			if cur, err = n.build(x, cur, limit); err != nil {
				return 0, err
			}
		}
		return cur, nil
	case eAlt:
		to := n.state()
		for _, x := range e {
			s := n.state()
			n.eps[from] = append(n.eps[from], s)
			end, err := n.build(x, s, limit)
			if err != nil {
				return 0, err
			}
			n.eps[end] = append(n.eps[end], to)
		}
		return to, nil
	case eRep:
		cur := from
		for range e.min {
			var err error
			if cur, err = n.build(e.x, cur, limit); err != nil {
				return 0, err
			}
		}
		if e.max < 0 {
			s := n.state()
			n.eps[cur] = append(n.eps[cur], s)
			end, err := n.build(e.x, s, limit)
			if err != nil {
				return 0, err
			}
			n.eps[end] = append(n.eps[end], s)
			return s, nil
		}
		// optional copies: each may be skipped to the end
		to := n.state()
		n.eps[cur] = append(n.eps[cur], to)
		for range e.max - e.min {
			end, err := n.build(e.x, cur, limit)
			if err != nil {
				return 0, err
			}
			n.eps[end] = append(n.eps[end], to)
			cur = end
		}
		return to, nil
	case eCall:
		to := n.state()
		n.calls[from] = append(n.calls[from], callEdge{rule: int32(e), to: to})
		return to, nil
	case eDFA:
		d := e.d
		base := int32(n.len())
		for range d.accept {
			n.state()
		}
		to := n.state()
		n.eps[from] = append(n.eps[from], base)
		for s := range d.accept {
			if d.accept[s] {
				n.eps[base+int32(s)] = append(n.eps[base+int32(s)], to)
			}
			row := d.next[s*256 : s*256+256]
			for b := 0; b < 256; {
				t := row[b]
				if t < 0 {
					b++
					continue
				}
				lo := b
				for b < 256 && row[b] == t {
					b++
				}
				n.edges[base+int32(s)] = append(n.edges[base+int32(s)], nfaEdge{byte(lo), byte(b - 1), base + t})
			}
		}
		return to, nil
	}
	panic("grammar: unknown expression")
}
