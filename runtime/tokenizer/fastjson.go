package tokenizer

import (
	"bytes"
	"encoding/json"
)

// The vocabulary and merges are nearly all of a tokenizer.json (280,000
// merges and 128,000 tokens for Llama-3) and encoding/json's reflection
// makes them most of the load time. These scanners read the two shapes
// directly; on anything they do not expect they report !ok and the caller
// falls back to encoding/json, which also produces the error message.

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a JSON string; escapes go through encoding/json.
func (s *scanner) str() (string, bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", false
	}
	start, escaped := s.i, false
	for j := s.i + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '\\':
			escaped = true
			j++
		case c < 0x20:
			return "", false
		case c == '"':
			s.i = j + 1
			if !escaped {
				return string(s.b[start+1 : j]), true
			}
			var out string
			if json.Unmarshal(s.b[start:j+1], &out) != nil {
				return "", false
			}
			return out, true
		}
	}
	return "", false
}

// int reads a non-negative integer that fits comfortably in an int.
func (s *scanner) int() (int, bool) {
	s.ws()
	n, digits := 0, 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' && digits < 10 {
		n = n*10 + int(s.b[s.i]-'0')
		s.i++
		digits++
	}
	if digits == 0 || s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E' || s.b[s.i] >= '0' && s.b[s.i] <= '9') {
		return 0, false
	}
	return n, true
}

func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// scanVocab reads {"token": id, ...}. Duplicate keys keep the last, as
// encoding/json does.
func scanVocab(b []byte) (map[string]int, bool) {
	s := &scanner{b: b}
	if !s.eat('{') {
		return nil, false
	}
	m := make(map[string]int, bytes.Count(b, []byte(`":`)))
	if s.eat('}') {
		return m, s.end()
	}
	for {
		k, ok := s.str()
		if !ok || !s.eat(':') {
			return nil, false
		}
		v, ok := s.int()
		if !ok {
			return nil, false
		}
		m[k] = v
		if s.eat(',') {
			continue
		}
		if s.eat('}') {
			return m, s.end()
		}
		return nil, false
	}
}

// scanMerges reads ["a b", ...] (strs: each string whole in [0]) or
// [["a", "b"], ...]; a list mixing the two is left to encoding/json.
func scanMerges(b []byte) (out [][2]string, strs, ok bool) {
	s := &scanner{b: b}
	if !s.eat('[') {
		return nil, false, false
	}
	out = make([][2]string, 0, bytes.Count(b, []byte(`,`))+1)
	if s.eat(']') {
		return out, false, s.end()
	}
	for k := 0; ; k++ {
		var m [2]string
		pair := s.eat('[')
		if k == 0 {
			strs = !pair
		} else if pair == strs {
			return nil, false, false
		}
		if m[0], ok = s.str(); !ok {
			return nil, false, false
		}
		if pair {
			if !s.eat(',') {
				return nil, false, false
			}
			if m[1], ok = s.str(); !ok || !s.eat(']') {
				return nil, false, false
			}
		}
		out = append(out, m)
		if s.eat(',') {
			continue
		}
		if s.eat(']') {
			return out, strs, s.end()
		}
		return nil, false, false
	}
}
