package grammar

import (
	"fmt"
	"regexp/syntax"
	"strings"
	"unicode"
)

// jsWhitespace is what \s matches in ECMAScript; \S written in a pattern
// must exclude all of it (Go's \S does not), so a generated string matches
// the pattern whoever checks it (ajv, a browser, Go).
const jsNotSpace = `[^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff}]`

// translateJS rewrites the ECMAScript spellings Go's parser lacks: \uXXXX
// and \u{X…} escapes, and \S outside a class (see jsNotSpace).
func translateJS(p string) string {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			n := p[i+1]
			switch {
			case n == 'u' && i+2 < len(p) && p[i+2] == '{':
				if j := strings.IndexByte(p[i+3:], '}'); j >= 0 {
					b.WriteString(`\x{` + p[i+3:i+3+j] + `}`)
					i += 3 + j
					continue
				}
			case n == 'u' && i+6 <= len(p) && isHex(p[i+2:i+6]):
				b.WriteString(`\x{` + p[i+2:i+6] + `}`)
				i += 5
				continue
			case n == 'S' && !inClass:
				b.WriteString(jsNotSpace)
				i++
				continue
			}
			b.WriteByte(c)
			b.WriteByte(n)
			i++
			continue
		case c == '[' && !inClass:
			inClass = true
		case c == ']' && inClass:
			inClass = false
		}
		b.WriteByte(c)
	}
	return b.String()
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// regexOpts says how a pattern is compiled.
type regexOpts struct {
	// escaped: the match is written inside a JSON string (escapes).
	escaped bool
	// search: the pattern may match anywhere (JSON Schema's "pattern");
	// else the whole text must match.
	search bool
}

// compileRegex compiles a pattern to an expression.
func compileRegex(pattern string, o regexOpts) (expr, error) {
	re, err := syntax.Parse(translateJS(pattern), syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	re = re.Simplify()
	// anchors: only at the start and the end
	begin, end := false, false
	var parts []*syntax.Regexp
	if re.Op == syntax.OpConcat {
		parts = re.Sub
	} else {
		parts = []*syntax.Regexp{re}
	}
	for len(parts) > 0 && isBegin(parts[0]) {
		begin, parts = true, parts[1:]
	}
	for len(parts) > 0 && isEnd(parts[len(parts)-1]) {
		end, parts = true, parts[:len(parts)-1]
	}
	c := &regexCompiler{o: o}
	var body []expr
	for _, p := range parts {
		x, err := c.compile(p)
		if err != nil {
			return nil, fmt.Errorf("pattern %q: %w", pattern, err)
		}
		body = append(body, x)
	}
	e := seq(body...)
	if o.search {
		anyText := rep(classExpr(anyRunes, o.escaped), 0, -1)
		if !begin {
			e = seq(anyText, e)
		}
		if !end {
			e = seq(e, anyText)
		}
	}
	return e, nil
}

func isBegin(r *syntax.Regexp) bool {
	return r.Op == syntax.OpBeginText || r.Op == syntax.OpBeginLine
}

func isEnd(r *syntax.Regexp) bool {
	return r.Op == syntax.OpEndText || r.Op == syntax.OpEndLine
}

type regexCompiler struct{ o regexOpts }

// maxRepeat bounds a counted repetition's copies.
const maxRepeat = 1000

func (c *regexCompiler) compile(re *syntax.Regexp) (expr, error) {
	switch re.Op {
	case syntax.OpNoMatch:
		return none, nil
	case syntax.OpEmptyMatch:
		return empty, nil
	case syntax.OpLiteral:
		var parts []expr
		for _, r := range re.Rune {
			ranges := []runeRange{{r, r}}
			if re.Flags&syntax.FoldCase != 0 {
				for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
					ranges = append(ranges, runeRange{f, f})
				}
			}
			parts = append(parts, classExpr(ranges, c.o.escaped))
		}
		return seq(parts...), nil
	case syntax.OpCharClass:
		var ranges []runeRange
		for i := 0; i+1 < len(re.Rune); i += 2 {
			ranges = append(ranges, runeRange{re.Rune[i], re.Rune[i+1]})
		}
		if len(ranges) == 0 {
			return none, nil
		}
		return classExpr(ranges, c.o.escaped), nil
	case syntax.OpAnyCharNotNL:
		// ECMAScript's dot leaves out every line terminator
		return classExpr([]runeRange{{0, '\n' - 1}, {'\n' + 1, '\r' - 1}, {'\r' + 1, 0x2027}, {0x202A, unicode.MaxRune}}, c.o.escaped), nil
	case syntax.OpAnyChar:
		return classExpr(anyRunes, c.o.escaped), nil
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText:
		return nil, fmt.Errorf("an anchor (^ or $) inside the pattern is not supported (only at its start and end)")
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return nil, fmt.Errorf(`word boundaries (\b, \B) are not supported`)
	case syntax.OpCapture:
		return c.compile(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		x, err := c.compile(re.Sub[0])
		if err != nil {
			return nil, err
		}
		switch re.Op {
		case syntax.OpStar:
			return rep(x, 0, -1), nil
		case syntax.OpPlus:
			return rep(x, 1, -1), nil
		}
		return opt(x), nil
	case syntax.OpRepeat:
		if re.Min > maxRepeat || re.Max > maxRepeat {
			return nil, fmt.Errorf("a repetition over %d is not supported", maxRepeat)
		}
		x, err := c.compile(re.Sub[0])
		if err != nil {
			return nil, err
		}
		return rep(x, re.Min, re.Max), nil
	case syntax.OpConcat, syntax.OpAlternate:
		parts := make([]expr, 0, len(re.Sub))
		for _, s := range re.Sub {
			x, err := c.compile(s)
			if err != nil {
				return nil, err
			}
			parts = append(parts, x)
		}
		if re.Op == syntax.OpConcat {
			return seq(parts...), nil
		}
		return alt(parts...), nil
	}
	return nil, fmt.Errorf("regular expression operator %v is not supported", re.Op)
}
