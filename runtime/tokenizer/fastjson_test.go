package tokenizer

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

// The fast scanners must agree with encoding/json wherever they accept.
func TestScanVocab(t *testing.T) {
	tests := []string{
		`{}`, ` { "a" : 1 , "b":2 } `, `{"\u0120the": 3, "\"q\"": 4, "é": 5}`, `{"a": 1, "a": 2}`,
		`{"a": 1.5}`, `{"a": -1}`, `{"a": 1e3}`, `{"a": 12345678901}`, `{"a" 1}`, `{"a": 1,}`, `[]`, `{"a": 1} x`, "{\"a\x01\": 1}",
	}
	for _, in := range tests {
		got, ok := scanVocab([]byte(in))
		var want map[string]int
		err := json.Unmarshal([]byte(in), &want)
		if ok && (err != nil || !maps.Equal(got, want)) {
			t.Errorf("scanVocab(%s) = %v, encoding/json %v, %v", in, got, want, err)
		}
	}
}

func TestScanMerges(t *testing.T) {
	tests := []struct {
		in   string
		want [][2]string // nil: must fall back
	}{
		{`[]`, [][2]string{}},
		{`["a b", "\u0120 t"]`, [][2]string{{"a b"}, {"Ġ t"}}},
		{` [ ["a","b"] , ["c d","e"] ] `, [][2]string{{"a", "b"}, {"c d", "e"}}},
		{`["a b", ["c", "d"]]`, nil},
		{`[["a"]]`, nil},
		{`["a b",]`, nil},
		{`{"a": 1}`, nil},
	}
	for _, tt := range tests {
		got, _, ok := scanMerges([]byte(tt.in))
		if ok != (tt.want != nil) || ok && !slices.Equal(got, tt.want) {
			t.Errorf("scanMerges(%s) = %q, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
}
