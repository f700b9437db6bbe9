package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestTokenizeCommand(t *testing.T) {
	const tok = "../../../runtime/tokenizer/testdata/small_bytelevel/tokenizer.json"
	run := func(stdin string, args ...string) (string, int) {
		tokenizeStdin = strings.NewReader(stdin)
		t.Cleanup(func() { tokenizeStdin = nil })
		var stdout, stderr bytes.Buffer
		code := runMain(context.Background(), &stdout, &stderr, append([]string{"tokenize"}, args...))
		return stdout.String() + stderr.String(), code
	}
	tests := []struct {
		name     string
		stdin    string
		args     []string
		want     string
		wantCode int
	}{
		{"encode", "Call me Ishmael.", []string{"--tokenizer", tok}, "[34,543,757,358,939,76,64,301,13]\n", 0},
		{"encode with BOS", "Call me Ishmael.", []string{"--tokenizer", tok, "--add-special-tokens"}, "[2323,34,543,757,358,939,76,64,301,13]\n", 0},
		{"decode", "[2323,34,543,757,358,939,76,64,301,13]", []string{"--tokenizer", tok, "--decode"}, "<|begin_of_text|>Call me Ishmael.", 0},
		{"decode skipping special", "[2323,34,543,757]", []string{"--tokenizer", tok, "--decode", "--skip-special-tokens"}, "Call me", 0},
		{"unknown id", "[1, 99999]", []string{"--tokenizer", tok, "--decode"}, "unknown token id: 99999", 1},
		{"not an array", "hello", []string{"--tokenizer", tok, "--decode"}, "not a JSON array", 1},
		{"no tokenizer flag", "x", nil, "--tokenizer is required", 2},
		{"missing file", "x", []string{"--tokenizer", "nope.json"}, "no such file", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, code := run(tt.stdin, tt.args...)
			if code != tt.wantCode || !strings.Contains(got, tt.want) {
				t.Errorf("exit %d, output %q; want exit %d containing %q", code, got, tt.wantCode, tt.want)
			}
		})
	}
}
