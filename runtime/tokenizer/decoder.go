package tokenizer

import (
	"bytes"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// decoder turns one token's vocabulary string into the bytes it stands for.
// Every Hugging Face decoder this package supports acts on each token alone,
// except that after Fuse a Strip or Metaspace prefix rule applies to the
// start of the whole text; first carries that. Working token by token is
// what lets the stream decoder emit text as ids arrive.
type decoder struct {
	steps []decodeStep
	// firstSensitive: some step treats the first token differently, so
	// the table of decoded tokens does not hold for it.
	firstSensitive bool
}

type decodeStep func(tok []byte, first bool) []byte

func buildDecoder(c *componentJSON) (*decoder, error) {
	d := &decoder{}
	if c == nil {
		return d, nil
	}
	fused := false
	if err := d.add(c, &fused); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *decoder) add(c *componentJSON, fused *bool) error {
	switch c.Type {
	case "Sequence":
		for i := range c.Decoders {
			if err := d.add(&c.Decoders[i], fused); err != nil {
				return err
			}
		}
	case "ByteLevel":
		d.steps = append(d.steps, func(tok []byte, _ bool) []byte {
			return byteLevelDecode(nil, string(tok))
		})
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil {
			return fmt.Errorf("%w: Replace decoder with a regex pattern", ErrUnsupported)
		}
		old, repl := []byte(*c.Pattern.String), []byte(c.Content)
		d.steps = append(d.steps, func(tok []byte, _ bool) []byte { return bytes.ReplaceAll(tok, old, repl) })
	case "ByteFallback":
		d.steps = append(d.steps, func(tok []byte, _ bool) []byte {
			if len(tok) == 6 && bytes.HasPrefix(tok, []byte("<0x")) && tok[5] == '>' {
				if v, err := strconv.ParseUint(string(tok[3:5]), 16, 8); err == nil {
					return []byte{byte(v)}
				}
			}
			return tok
		})
	case "Fuse":
		*fused = true
	case "Strip":
		content := []byte(c.Content)
		start, stop, onlyFirst := c.Start, c.Stop, *fused
		d.firstSensitive = d.firstSensitive || onlyFirst
		if onlyFirst && stop > 0 {
			return fmt.Errorf("%w: Strip decoder with stop > 0 after Fuse", ErrUnsupported)
		}
		d.steps = append(d.steps, func(tok []byte, first bool) []byte {
			if onlyFirst && !first {
				return tok
			}
			for k := 0; k < start && bytes.HasPrefix(tok, content); k++ {
				tok = tok[len(content):]
			}
			for k := 0; k < stop && bytes.HasSuffix(tok, content); k++ {
				tok = tok[:len(tok)-len(content)]
			}
			return tok
		})
	case "Metaspace":
		repl := c.Replacement
		if repl == "" {
			repl = "▁"
		}
		strip := c.PrependScheme != "never" && !(c.AddPrefixSpace != nil && !*c.AddPrefixSpace)
		d.firstSensitive = d.firstSensitive || strip
		d.steps = append(d.steps, func(tok []byte, first bool) []byte {
			tok = bytes.ReplaceAll(tok, []byte(repl), []byte(" "))
			if strip && first {
				tok = bytes.TrimPrefix(tok, []byte(" "))
			}
			return tok
		})
	default:
		return fmt.Errorf("%w: decoder %q", ErrUnsupported, c.Type)
	}
	return nil
}

// token decodes one vocabulary string; first says it starts the output.
func (d *decoder) token(dst []byte, tok string, first bool) []byte {
	if len(d.steps) == 0 {
		return append(dst, tok...)
	}
	b := []byte(tok)
	for _, s := range d.steps {
		b = s(b, first)
	}
	return append(dst, b...)
}

// appendLossy appends b to dst as UTF-8, replacing each maximal ill-formed
// subsequence with U+FFFD, the rule Rust's String::from_utf8_lossy (and so
// Hugging Face's decode) follows.
func appendLossy(dst []byte, b []byte) []byte {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r != utf8.RuneError || n > 1 {
			dst, b = append(dst, b[:n]...), b[n:]
			continue
		}
		dst = append(dst, "\uFFFD"...)
		b = b[maximalSubpart(b):]
	}
	return dst
}

// maximalSubpart is the length (at least 1) of the longest prefix of b that
// starts a well-formed UTF-8 sequence but does not complete one.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n
}

// incompleteTail reports how many trailing bytes of b form the start of a
// UTF-8 sequence that more bytes could still complete.
func incompleteTail(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		tail := b[len(b)-k:]
		if tail[0] < 0x80 {
			return 0
		}
		if tail[0] >= 0xC0 { // a leading byte: is it waiting for more?
			if utf8.FullRune(tail) {
				return 0
			}
			if maximalSubpart(tail) == len(tail) {
				return k
			}
			return 0
		}
	}
	return 0
}

// decodeTable holds every token's decoded bytes (as a non-first token) in
// one buffer, so Decode is a copy per token rather than a pass of the
// decoder steps and a map lookup per rune.
type decodeTable struct {
	buf []byte
	off []uint32 // token id i is buf[off[i]:off[i+1]]
}

func newDecodeTable(d *decoder, tokens []string) decodeTable {
	t := decodeTable{off: make([]uint32, len(tokens)+1)}
	for i, tok := range tokens {
		t.buf = d.token(t.buf, tok, false)
		t.off[i+1] = uint32(len(t.buf))
	}
	t.buf = t.buf[:len(t.buf):len(t.buf)]
	return t
}

// appendToken appends id's decoded bytes; id must be valid.
func (t *Tokenizer) appendToken(dst []byte, id int, first bool) []byte {
	if first && t.dec.firstSensitive {
		return t.dec.token(dst, t.tokens[id], true)
	}
	return append(dst, t.decoded.buf[t.decoded.off[id]:t.decoded.off[id+1]]...)
}
