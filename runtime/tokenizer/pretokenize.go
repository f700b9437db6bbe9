package tokenizer

import (
	"fmt"
	"strings"
)

// preTokenizer cuts one normalised text segment into the pieces the model
// merges within. atStart says whether the segment begins the input (for
// Metaspace's prepend_scheme "first").
type preTokenizer struct {
	steps     []preStep
	byteLevel bool // a ByteLevel step is present: pieces are raw bytes
}

type preStep func(dst []string, piece string, atStart bool) []string

func buildPreTokenizer(c *componentJSON) (*preTokenizer, error) {
	p := &preTokenizer{}
	if c == nil {
		return p, nil
	}
	if err := p.add(c); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *preTokenizer) add(c *componentJSON) error {
	switch c.Type {
	case "Sequence":
		for i := range c.Pretokenizers {
			if err := p.add(&c.Pretokenizers[i]); err != nil {
				return err
			}
		}
		return nil
	case "ByteLevel":
		p.byteLevel = true
		prefix := c.AddPrefixSpace != nil && *c.AddPrefixSpace
		// use_regex defaults to true in Hugging Face.
		useRegex := c.UseRegex == nil || *c.UseRegex
		p.steps = append(p.steps, func(dst []string, s string, _ bool) []string {
			if prefix && !strings.HasPrefix(s, " ") {
				s = " " + s
			}
			if useRegex {
				return patGPT2.split(dst, s)
			}
			return append(dst, s)
		})
		return nil
	case "Split":
		if c.Pattern == nil || c.Pattern.Regex == nil {
			return fmt.Errorf("%w: Split pre-tokenizer without a regex pattern", ErrUnsupported)
		}
		pat, ok := knownPatterns[*c.Pattern.Regex]
		if !ok {
			return fmt.Errorf("%w: Split pre-tokenizer regex %q (supported: the GPT-2, Llama-3 and Qwen2 patterns)", ErrUnsupported, *c.Pattern.Regex)
		}
		if c.Behavior != "Isolated" || c.Invert {
			return fmt.Errorf("%w: Split behavior %q invert=%v", ErrUnsupported, c.Behavior, c.Invert)
		}
		p.steps = append(p.steps, func(dst []string, s string, _ bool) []string { return pat.split(dst, s) })
		return nil
	case "Metaspace":
		repl := c.Replacement
		if repl == "" {
			repl = "▁"
		}
		scheme := c.PrependScheme
		if scheme == "" {
			scheme = "always"
			if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
				scheme = "never"
			}
		}
		split := c.Split == nil || *c.Split
		p.steps = append(p.steps, func(dst []string, s string, atStart bool) []string {
			s = strings.ReplaceAll(s, " ", repl)
			if !strings.HasPrefix(s, repl) && (scheme == "always" || scheme == "first" && atStart) {
				s = repl + s
			}
			if !split {
				return append(dst, s)
			}
			// MergedWithNext: each replacement starts a new piece.
			for len(s) > 0 {
				from := 0
				if strings.HasPrefix(s, repl) {
					from = len(repl)
				}
				i := strings.Index(s[from:], repl)
				if i < 0 {
					dst = append(dst, s)
					break
				}
				dst, s = append(dst, s[:from+i]), s[from+i:]
			}
			return dst
		})
		return nil
	}
	return fmt.Errorf("%w: pre-tokenizer %q", ErrUnsupported, c.Type)
}

// run applies every step to every piece in turn.
func (p *preTokenizer) run(dst []string, s string, atStart bool) []string {
	if len(p.steps) == 0 {
		return append(dst, s)
	}
	start := len(dst)
	dst = append(dst, s)
	var scratch []string
	for _, step := range p.steps {
		scratch = scratch[:0]
		for k, piece := range dst[start:] {
			scratch = step(scratch, piece, atStart && k == 0)
		}
		dst = append(dst[:start], scratch...)
	}
	return dst
}
