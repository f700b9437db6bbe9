package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Added tokens (special tokens such as <|im_start|> and user-added words)
// are cut out of the text before normalisation and pre-tokenization, so
// they are never split. As in Hugging Face's AddedVocabulary the scan is
// leftmost-longest, tokens marked normalized=false are matched in the raw
// text and normalized=true ones in the normalised text, lstrip/rstrip
// swallow adjacent whitespace and single_word requires word boundaries.

type addedToken struct {
	id                         int
	content                    string
	singleWord, lstrip, rstrip bool
	normalized, special        bool
}

// addedMatcher finds added tokens in text. Read-only after construction.
type addedMatcher struct {
	byFirst [256][]*addedToken // candidates by first byte, longest first;
	// an array, not a map: it is consulted for every byte of the input
}

func newAddedMatcher(toks []*addedToken) *addedMatcher {
	if len(toks) == 0 {
		return nil
	}
	m := &addedMatcher{}
	for _, t := range toks {
		if t.content == "" {
			continue
		}
		m.byFirst[t.content[0]] = append(m.byFirst[t.content[0]], t)
	}
	for _, l := range &m.byFirst {
		sort.SliceStable(l, func(i, j int) bool { return len(l[i].content) > len(l[j].content) })
	}
	return m
}

// segment is a span of text, or an added token when tok is not nil.
type segment struct {
	text  string
	tok   *addedToken
	start int // byte offset in the string that was split, for "first" rules
}

// split cuts s into text and added-token segments. skipSpecial leaves
// special tokens as text (split_special_tokens).
func (m *addedMatcher) split(dst []segment, s string, base int, skipSpecial bool) []segment {
	if m == nil {
		return append(dst, segment{text: s, start: base})
	}
	textStart := 0 // start of the pending text segment
	for i := 0; i < len(s); {
		t := m.matchAt(s, i, skipSpecial)
		if t == nil {
			i++
			continue
		}
		start, stop := i, i+len(t.content)
		if t.lstrip {
			for start > textStart {
				r, n := utf8.DecodeLastRuneInString(s[textStart:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= n
			}
		}
		if t.rstrip {
			stop += len(s[stop:]) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
		}
		if start > textStart {
			dst = append(dst, segment{text: s[textStart:start], start: base + textStart})
		}
		dst = append(dst, segment{text: s[start:stop], tok: t, start: base + start})
		textStart, i = stop, stop
	}
	if textStart < len(s) {
		dst = append(dst, segment{text: s[textStart:], start: base + textStart})
	}
	return dst
}

func (m *addedMatcher) matchAt(s string, i int, skipSpecial bool) *addedToken {
	for _, t := range m.byFirst[s[i]] {
		if skipSpecial && t.special {
			continue
		}
		if !strings.HasPrefix(s[i:], t.content) {
			continue
		}
		if t.singleWord && (endsWithWord(s[:i]) || startsWithWord(s[i+len(t.content):])) {
			continue
		}
		return t
	}
	return nil
}

func isWordChar(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) }

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}
