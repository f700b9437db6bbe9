package grammar

import (
	"fmt"
	"unicode/utf8"
)

// runeRange is an inclusive range of code points.
type runeRange struct{ lo, hi rune }

// utf8Expr is the expression matching the UTF-8 encoding of any code point
// in the ranges (surrogates excluded: they have no UTF-8 form).
func utf8Expr(ranges []runeRange) expr {
	var alts []expr
	for _, r := range ranges {
		utf8Seqs(r.lo, r.hi, func(seq []byteRange) {
			parts := make([]expr, len(seq))
			for i, b := range seq {
				parts[i] = eBytes{b}
			}
			alts = append(alts, seq2(parts))
		})
	}
	return mergeASCII(alts)
}

func seq2(parts []expr) expr {
	if len(parts) == 1 {
		return parts[0]
	}
	return eSeq(parts)
}

// mergeASCII folds the one-byte alternatives into one byte set.
func mergeASCII(alts []expr) expr {
	var bytes eBytes
	var rest []expr
	for _, a := range alts {
		if b, ok := a.(eBytes); ok {
			bytes = append(bytes, b...)
			continue
		}
		rest = append(rest, a)
	}
	if len(bytes) > 0 {
		rest = append([]expr{bytes}, rest...)
	}
	return alt(rest...)
}

// utf8Seqs calls emit with the byte-range sequences whose union is the
// UTF-8 encoding of [lo, hi] (the classic split: by encoded length, then
// so that every continuation byte spans its full range or one prefix).
func utf8Seqs(lo, hi rune, emit func([]byteRange)) {
	if lo > hi {
		return
	}
	if hi > utf8.MaxRune {
		hi = utf8.MaxRune
	}
	if lo <= 0xDFFF && hi >= 0xD800 {
		utf8Seqs(lo, 0xD7FF, emit)
		utf8Seqs(0xE000, hi, emit)
		return
	}
	for _, m := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= m && hi > m {
			utf8Seqs(lo, m, emit)
			utf8Seqs(m+1, hi, emit)
			return
		}
	}
	if hi <= 0x7F {
		emit([]byteRange{{byte(lo), byte(hi)}})
		return
	}
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Seqs(lo, lo|m, emit)
				utf8Seqs((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				utf8Seqs(lo, (hi&^m)-1, emit)
				utf8Seqs(hi&^m, hi, emit)
				return
			}
		}
	}
	var a, b [4]byte
	utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	seq := make([]byteRange, n)
	for i := range n {
		seq[i] = byteRange{a[i], b[i]}
	}
	emit(seq)
}

// Rune sets for JSON string contents.

// jsonSpecial reports whether r must be escaped inside a JSON string.
func jsonSpecial(r rune) bool { return r < 0x20 || r == '"' || r == '\\' }

// escapeOf is the escape written for a rune that needs one.
func escapeOf(r rune) string {
	switch r {
	case '"':
		return `\"`
	case '\\':
		return `\\`
	case '\n':
		return `\n`
	case '\t':
		return `\t`
	case '\r':
		return `\r`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// classExpr matches one code point of the ranges, as raw UTF-8 or, with
// escaped set, as it is written inside a JSON string (quote, backslash and
// control characters by their escapes).
func classExpr(ranges []runeRange, escaped bool) expr {
	if !escaped {
		return utf8Expr(ranges)
	}
	var plain []runeRange
	var esc []expr
	for _, r := range ranges {
		lo := r.lo
		for c := r.lo; c <= r.hi && c < 0x60; c++ {
			if jsonSpecial(c) {
				if c > lo {
					plain = append(plain, runeRange{lo, c - 1})
				}
				esc = append(esc, eLit(escapeOf(c)))
				lo = c + 1
			}
		}
		if lo <= r.hi {
			plain = append(plain, runeRange{lo, r.hi})
		}
	}
	if len(esc) > 8 {
		// the control characters written \u00XX share a prefix
		return alt(utf8Expr(plain), escapesExpr(ranges))
	}
	return alt(append([]expr{utf8Expr(plain)}, esc...)...)
}

// escapesExpr is the escapes of the special runes of ranges, as a tree
// (\u00XX for the control characters without a short escape).
func escapesExpr(ranges []runeRange) expr {
	in := func(c rune) bool {
		for _, r := range ranges {
			if r.lo <= c && c <= r.hi {
				return true
			}
		}
		return false
	}
	var short []expr
	var u0, u1 []byte // \u000X and \u001X: the last hex digit
	for c := rune(0); c < 0x60; c++ {
		if !jsonSpecial(c) || !in(c) {
			continue
		}
		e := escapeOf(c)
		if len(e) == 2 {
			short = append(short, eLit(e[1:]))
			continue
		}
		if c < 0x10 {
			u0 = append(u0, e[5])
		} else {
			u1 = append(u1, e[5])
		}
	}
	set := func(bs []byte) expr {
		var r eBytes
		for _, b := range bs {
			r = append(r, byteRange{b, b})
		}
		return r
	}
	var u []expr
	if len(u0) > 0 {
		u = append(u, seq(eLit("0"), set(u0)))
	}
	if len(u1) > 0 {
		u = append(u, seq(eLit("1"), set(u1)))
	}
	if len(u) > 0 {
		short = append(short, seq(eLit("u00"), alt(u...)))
	}
	return seq(eLit(`\`), alt(short...))
}

// anyRunes is every code point.
var anyRunes = []runeRange{{0, utf8.MaxRune}}

// jsonChar is one character of a JSON string: any code point, escaped
// where JSON requires.
func jsonChar() expr { return classExpr(anyRunes, true) }
