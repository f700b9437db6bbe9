package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// jv is a JSON value that keeps its object members in order (a schema's
// properties are generated in the order written) and its numbers as
// written.
type jv struct {
	kind byte // 'n' null, 'b' bool, 'f' number, 's' string, 'a' array, 'o' object
	b    bool
	num  string
	str  string
	arr  []*jv
	keys []string
	vals []*jv
}

// maxJSONDepth bounds the nesting of a schema document.
const maxJSONDepth = 256

func parseJSON(data []byte) (*jv, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := readValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func readValue(dec *json.Decoder, depth int) (*jv, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxJSONDepth)
	}
	t, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch t := t.(type) {
	case nil:
		return &jv{kind: 'n'}, nil
	case bool:
		return &jv{kind: 'b', b: t}, nil
	case json.Number:
		return &jv{kind: 'f', num: t.String()}, nil
	case string:
		return &jv{kind: 's', str: t}, nil
	case json.Delim:
		switch t {
		case '[':
			v := &jv{kind: 'a'}
			for dec.More() {
				x, err := readValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.arr = append(v.arr, x)
			}
			_, err := dec.Token()
			return v, err
		case '{':
			v := &jv{kind: 'o'}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				x, err := readValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.keys = append(v.keys, k.(string))
				v.vals = append(v.vals, x)
			}
			_, err := dec.Token()
			return v, err
		}
	}
	return nil, fmt.Errorf("unexpected %v", t)
}

// get is the member key of an object (the last one written), or nil.
func (v *jv) get(key string) *jv {
	if v == nil || v.kind != 'o' {
		return nil
	}
	for i := len(v.keys) - 1; i >= 0; i-- {
		if v.keys[i] == key {
			return v.vals[i]
		}
	}
	return nil
}

// float is a number's value.
func (v *jv) float() (float64, bool) {
	if v == nil || v.kind != 'f' {
		return 0, false
	}
	f, err := strconv.ParseFloat(v.num, 64)
	return f, err == nil || errors.Is(err, strconv.ErrRange)
}

// compact appends the value as compact JSON.
func (v *jv) compact(dst []byte) []byte {
	switch v.kind {
	case 'n':
		return append(dst, "null"...)
	case 'b':
		return strconv.AppendBool(dst, v.b)
	case 'f':
		return append(dst, v.num...)
	case 's':
		return appendJSONString(dst, v.str)
	case 'a':
		dst = append(dst, '[')
		for i, x := range v.arr {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = x.compact(dst)
		}
		return append(dst, ']')
	}
	dst = append(dst, '{')
	for i, k := range v.keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(appendJSONString(dst, k), ':')
		dst = v.vals[i].compact(dst)
	}
	return append(dst, '}')
}

// appendJSONString writes s as a JSON string with the escapes the string
// grammar generates (so an enum's literal is one the grammar could write).
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for _, r := range s {
		if jsonSpecial(r) {
			dst = append(dst, escapeOf(r)...)
			continue
		}
		dst = append(dst, string(r)...)
	}
	return append(dst, '"')
}

// isInteger reports whether a number has no fraction.
func (v *jv) isInteger() bool {
	f, ok := v.float()
	return ok && f == float64(int64(f))
}
