package prepost

import (
	"encoding/json"
	"regexp"
	"strings"
)

// The text stages of a decoder's plugins (runtime/engine runs them around
// Generate): Redact before the prompt reaches the model, ExtractJSON after
// the whole answer is out.

// redactions are what Redact masks, in order: addresses, card-like digit
// runs, phone numbers. They are deliberately plain: a pre plugin is for
// what must never leave the kiosk's text box as written, and a pattern a
// reviewer can read is the point.
var redactions = []struct {
	re   *regexp.Regexp
	mask string
}{
	{regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}`), "[email]"},
	{regexp.MustCompile(`\b(?:\d[ -]?){12,18}\d\b`), "[number]"},
	{regexp.MustCompile(`\+?\d[\d ()-]{7,}\d`), "[phone]"},
}

// Redact masks e-mail addresses, long digit runs (card and account
// numbers) and phone numbers in s; n is how many it masked.
func Redact(s string) (out string, n int) {
	out = s
	for _, r := range redactions {
		out = r.re.ReplaceAllStringFunc(out, func(string) string { n++; return r.mask })
	}
	return out, n
}

// ExtractJSON finds the first complete JSON object or array in s (a
// model's answer with prose or a code fence around it) and returns it
// compacted; ok is false when s holds none.
func ExtractJSON(s string) (doc string, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] != '{' && s[i] != '[' {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(s[i:]))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			continue
		}
		return string(b), true
	}
	return "", false
}
