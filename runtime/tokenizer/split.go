package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer patterns of GPT-2 and of Llama-3/Qwen are written for
// Oniguruma and use the look-ahead `\s+(?!\S)`, which Go's regexp lacks, so
// each is hand-written here as a scanner that tries the alternatives in the
// pattern's order at every position, as a backtracking engine would. The
// tests check them against Hugging Face's own output.

// splitPattern is one supported Split regex, recognised by its exact text.
type splitPattern int

const (
	// patGPT2 is the ByteLevel pre-tokenizer's built-in regex:
	// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
	patGPT2 splitPattern = iota + 1
	// patLlama3 is Llama-3's pattern; digits go in runs of at most three.
	patLlama3
	// patQwen2 is Qwen2/Qwen3's pattern: Llama-3's with single digits.
	patQwen2
)

const (
	regexGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	regexLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	regexQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// knownPatterns maps a Split regex to its scanner. Llama-3.1+ and some
// Qwen files write the same pattern with \p{L} spelled differently; only
// texts listed here are accepted, anything else is ErrUnsupported.
var knownPatterns = map[string]splitPattern{
	regexGPT2:   patGPT2,
	regexLlama3: patLlama3,
	regexQwen2:  patQwen2,
}

// split appends the pieces of s to dst. Pieces are substrings of s; their
// concatenation is s.
func (p splitPattern) split(dst []string, s string) []string {
	for i := 0; i < len(s); {
		n := 0
		if p == patGPT2 {
			n = matchGPT2(s[i:])
		} else {
			n = matchLlama3(s[i:], p == patQwen2)
		}
		if n == 0 {
			// No alternative matches here (cannot happen for these
			// patterns, every rune is a letter, digit, space or other),
			// so keep the rune as a piece of its own rather than loop.
			_, n = utf8.DecodeRuneInString(s[i:])
		}
		dst = append(dst, s[i:i+n])
		i += n
	}
	return dst
}

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

// isSpace is Oniguruma's \s in Unicode mode: the White_Space property,
// which is exactly Go's unicode.IsSpace.
func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || '\t' <= r && r <= '\r'
	}
	return unicode.IsSpace(r)
}

func isOther(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) }

// run returns the byte length of the longest prefix of s whose runes satisfy f.
func run(s string, f func(rune) bool) int {
	for i, r := range s {
		if !f(r) {
			return i
		}
	}
	return len(s)
}

// first decodes the first rune of s (utf8.RuneError, 0 when s is empty).
func first(s string) (rune, int) {
	if s == "" {
		return utf8.RuneError, 0
	}
	if s[0] < utf8.RuneSelf {
		return rune(s[0]), 1
	}
	return utf8.DecodeRuneInString(s)
}

// contraction matches 's 't 're 've 'm 'll 'd, optionally ignoring case.
// Under (?i) Oniguruma folds U+017F LATIN SMALL LETTER LONG S to s.
func contraction(s string, fold bool) int {
	if len(s) < 2 || s[0] != '\'' {
		return 0
	}
	lower := func(r rune) rune {
		if !fold {
			return r
		}
		if r == 'ſ' {
			return 's'
		}
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	r1, n1 := first(s[1:])
	switch lower(r1) {
	case 's', 't', 'm', 'd':
		return 1 + n1
	case 'r', 'v':
		return contractionTail(s, 1+n1, 'e', lower)
	case 'l':
		return contractionTail(s, 1+n1, 'l', lower)
	}
	return 0
}

func contractionTail(s string, n int, want rune, lower func(rune) rune) int {
	r, m := first(s[n:])
	if m > 0 && lower(r) == want {
		return n + m
	}
	return 0
}

// optSpaceThen matches ` ?X+` for the class f.
func optSpaceThen(s string, f func(rune) bool) int {
	if len(s) > 1 && s[0] == ' ' {
		if n := run(s[1:], f); n > 0 {
			return 1 + n
		}
	}
	return run(s, f)
}

// spaceLookahead matches `\s+(?!\S)`: a whitespace run that ends the text,
// or the run minus its last rune when a non-space follows (that rune then
// starts the next piece, as " word").
func spaceLookahead(s string) int {
	n := run(s, isSpace)
	if n == 0 || n == len(s) {
		return n
	}
	_, last := utf8.DecodeLastRuneInString(s[:n])
	return n - last
}

func matchGPT2(s string) int {
	if n := contraction(s, false); n > 0 {
		return n
	}
	for _, f := range [...]func(rune) bool{isLetter, isNumber, isOther} {
		if n := optSpaceThen(s, f); n > 0 {
			return n
		}
	}
	if n := spaceLookahead(s); n > 0 {
		return n
	}
	return run(s, isSpace)
}

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

func matchLlama3(s string, singleDigit bool) int {
	if n := contraction(s, true); n > 0 {
		return n
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	r0, n0 := first(s)
	if !isCRLF(r0) && !isLetter(r0) && !isNumber(r0) {
		if n := run(s[n0:], isLetter); n > 0 {
			return n0 + n
		}
	} else if isLetter(r0) {
		return run(s, isLetter)
	}
	// \p{N}{1,3} or \p{N}
	if isNumber(r0) {
		n, max := n0, 3
		if singleDigit {
			max = 1
		}
		for k := 1; k < max; k++ {
			r, m := first(s[n:])
			if m == 0 || !isNumber(r) {
				break
			}
			n += m
		}
		return n
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	if n := optSpaceThen(s, isOther); n > 0 {
		return n + run(s[n:], isCRLF)
	}
	// \s*[\r\n]+ : the whitespace run up to and including its last newline.
	ws := run(s, isSpace)
	for i := ws - 1; i >= 0; i-- {
		if s[i] == '\r' || s[i] == '\n' {
			return i + 1
		}
	}
	if n := spaceLookahead(s); n > 0 {
		return n
	}
	return ws
}
