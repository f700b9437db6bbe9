package tokenizer

import (
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites the text between added tokens before pre-tokenizing.
type normalizer func(string) string

func buildNormalizer(c *componentJSON) (normalizer, error) {
	if c == nil {
		return nil, nil
	}
	switch c.Type {
	case "NFC":
		return norm.NFC.String, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "Lowercase":
		return strings.ToLower, nil
	case "Prepend":
		p := c.Prepend
		return func(s string) string {
			if s == "" {
				return s
			}
			return p + s
		}, nil
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil {
			return nil, fmt.Errorf("%w: Replace normalizer with a regex pattern", ErrUnsupported)
		}
		old, repl := *c.Pattern.String, c.Content
		return func(s string) string { return strings.ReplaceAll(s, old, repl) }, nil
	case "Sequence":
		var steps []normalizer
		for i := range c.Normalizers {
			n, err := buildNormalizer(&c.Normalizers[i])
			if err != nil {
				return nil, err
			}
			if n != nil {
				steps = append(steps, n)
			}
		}
		return func(s string) string {
			for _, n := range steps {
				s = n(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("%w: normalizer %q", ErrUnsupported, c.Type)
}
