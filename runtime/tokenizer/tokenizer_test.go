package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		wantErr error
		wantMsg string
	}{
		{"not json", `{"model": `, ErrMalformed, "unexpected end"},
		{"no model", `{}`, ErrMalformed, "no model"},
		{"wordpiece", `{"model": {"type": "WordPiece", "vocab": {"a": 0}}}`, ErrUnsupported, `"WordPiece"`},
		{"unigram", `{"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}`, ErrUnsupported, `"Unigram"`},
		{"untyped non-BPE", `{"model": {"vocab": {"a": 0}}}`, ErrUnsupported, "not BPE"},
		{"merge of unknown token", `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}`, ErrMalformed, `"a" "b"`},
		{"bad merge string", `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]}}`, ErrMalformed, "two tokens"},
		{"bad merge pair", `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a"]]}}`, ErrMalformed, "want a pair"},
		{"duplicate id", `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}}`, ErrMalformed, "id 0 used by"},
		{"negative id", `{"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}}`, ErrMalformed, "id -1"},
		{"sparse ids", `{"model": {"type": "BPE", "vocab": {"a": 99999999}, "merges": []}}`, ErrMalformed, "id 99999999"},
		{"unknown regex", `{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrUnsupported, `\\w+`},
		{"unknown pre-tokenizer", `{"pre_tokenizer": {"type": "BertPreTokenizer"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrUnsupported, "BertPreTokenizer"},
		{"unknown normalizer", `{"normalizer": {"type": "BertNormalizer"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrUnsupported, "BertNormalizer"},
		{"unknown decoder", `{"decoder": {"type": "WordPiece"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrUnsupported, "WordPiece"},
		{"unknown post-processor", `{"post_processor": {"type": "BertProcessing"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrUnsupported, "BertProcessing"},
		{"dropout", `{"model": {"type": "BPE", "dropout": 0.1, "vocab": {}, "merges": []}}`, ErrUnsupported, "dropout"},
		{"missing unk", `{"model": {"type": "BPE", "unk_token": "<unk>", "vocab": {}, "merges": []}}`, ErrMalformed, "<unk>"},
		{"byte fallback without bytes", `{"model": {"type": "BPE", "byte_fallback": true, "vocab": {}, "merges": []}}`, ErrMalformed, "<0x00>"},
		{"template without token", `{"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}]}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, ErrMalformed, "<s>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.json))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Parse error = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Parse error %q does not mention %q", err, tt.wantMsg)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("testdata/no-such/tokenizer.json")
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load error = %v, want ErrNotExist", err)
	}
}

func TestDecodeUnknownID(t *testing.T) {
	tk := loadNamed(t, "small_gpt2")
	for _, id := range []int{-1, tk.VocabSize(), 1 << 30} {
		if _, err := tk.Decode([]int{0, id}); !errors.Is(err, ErrUnknownID) {
			t.Errorf("Decode(%d) error = %v, want ErrUnknownID", id, err)
		}
		if _, err := tk.NewStreamDecoder().Add(id); !errors.Is(err, ErrUnknownID) {
			t.Errorf("StreamDecoder.Add(%d) error = %v, want ErrUnknownID", id, err)
		}
	}
}

func TestSpecialTokens(t *testing.T) {
	tests := []struct {
		name     string
		bos, eos string // "" when absent
		vocab    int
	}{
		{"small_bytelevel", "<|begin_of_text|>", "", 2327},
		{"small_metaspace", "<s>", "", 0},
		{"llama3", "<|begin_of_text|>", "<|end_of_text|>", 128256},
		{"qwen3", "", "<|im_end|>", 151669},
		{"gpt2", "", "", 50257},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk := loadNamed(t, tt.name)
			for _, c := range []struct {
				what string
				get  func() (int, bool)
				want string
			}{{"BOS", tk.BOS, tt.bos}, {"EOS", tk.EOS, tt.eos}} {
				id, ok := c.get()
				if ok != (c.want != "") {
					t.Fatalf("%s present = %v, want %q", c.what, ok, c.want)
				}
				if ok {
					if tok, _ := tk.Token(id); tok != c.want {
						t.Errorf("%s = %d (%q), want %q", c.what, id, tok, c.want)
					}
					if !tk.IsSpecial(id) {
						t.Errorf("%s %d is not marked special", c.what, id)
					}
				}
			}
			if tt.vocab != 0 && tk.VocabSize() != tt.vocab {
				t.Errorf("VocabSize = %d, want %d", tk.VocabSize(), tt.vocab)
			}
		})
	}
}

func TestEncodeOptions(t *testing.T) {
	tk := loadNamed(t, "small_bytelevel")
	bos, _ := tk.BOS()
	text := "hi<|eot_id|>"
	eot, ok := tk.TokenID("<|eot_id|>")
	if !ok {
		t.Fatal("no <|eot_id|>")
	}
	plain := tk.Encode(text)
	if plain[len(plain)-1] != eot {
		t.Errorf("Encode(%q) = %v, want it to end with %d", text, plain, eot)
	}
	if got := tk.EncodeWithSpecial(text); got[0] != bos || !slices.Equal(got[1:], plain) {
		t.Errorf("EncodeWithSpecial = %v, want BOS %d + %v", got, bos, plain)
	}
	split := tk.EncodeWith(text, EncodeOptions{SplitSpecialTokens: true})
	if slices.Contains(split, eot) {
		t.Errorf("SplitSpecialTokens still produced the special id: %v", split)
	}
	if s, _ := tk.Decode(split); s != text {
		t.Errorf("Decode(split) = %q, want %q", s, text)
	}
	if s, _ := tk.DecodeWith(tk.EncodeWithSpecial(text), DecodeOptions{SkipSpecialTokens: true}); s != "hi" {
		t.Errorf("DecodeWith(SkipSpecialTokens) = %q, want %q", s, "hi")
	}
}

// TestStreamDecoder checks that streamed text equals Decode and never
// carries a replacement character for valid input.
func TestStreamDecoder(t *testing.T) {
	in := readInputs(t)
	for _, name := range []string{"small_gpt2", "small_bytelevel", "small_metaspace"} {
		t.Run(name, func(t *testing.T) {
			tk := loadNamed(t, name)
			d := tk.NewStreamDecoder()
			for _, text := range append(slices.Clone(in.Edge), in.Moby[:5]...) {
				ids := tk.Encode(text)
				want, err := tk.Decode(ids)
				if err != nil {
					t.Fatal(err)
				}
				var sb strings.Builder
				for _, id := range ids {
					s, err := d.Add(id)
					if err != nil {
						t.Fatal(err)
					}
					if strings.ContainsRune(s, '\uFFFD') {
						t.Errorf("%q: Add(%d) emitted U+FFFD", clip(text), id)
					}
					sb.WriteString(s)
				}
				sb.WriteString(d.Flush())
				if sb.String() != want {
					t.Errorf("stream %q, Decode %q", clip(sb.String()), clip(want))
				}
			}
		})
	}
}

func TestStreamDecoderSplitsRune(t *testing.T) {
	tk := loadNamed(t, "small_gpt2")
	ids := tk.Encode("🤖") // 4 bytes, several tokens in a 2000-merge vocabulary
	if len(ids) < 2 {
		t.Fatalf("want a multi-token emoji, got %v", ids)
	}
	d := tk.NewStreamDecoder()
	var out []string
	for _, id := range ids {
		s, err := d.Add(id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	want := make([]string, len(ids))
	want[len(ids)-1] = "🤖"
	if !slices.Equal(out, want) {
		t.Errorf("Add outputs = %q, want %q", out, want)
	}
	// A sequence cut inside a rune flushes as one U+FFFD.
	d.Add(ids[0])
	if s := d.Flush(); s != "\uFFFD" {
		t.Errorf("Flush = %q, want U+FFFD", s)
	}
}

func TestLossy(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc", "abc"},
		{"\xe2\x82", "\uFFFD"},                 // truncated 3-byte sequence: one maximal subpart
		{"\xe2\x82A", "\uFFFDA"},               //
		{"\xff\xfe", "\uFFFD\uFFFD"},           // never-valid bytes, one each
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // surrogate: E0-ED rule
		{"\xf0\x9f\x98", "\uFFFD"},
		{"é\xc3", "é\uFFFD"},
	}
	for _, tt := range tests {
		if got := string(appendLossy(nil, []byte(tt.in))); got != tt.want {
			t.Errorf("appendLossy(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestCacheAndConcurrency encodes the same texts from several goroutines,
// with and without the merge cache, and wants the same ids everywhere.
func TestCacheAndConcurrency(t *testing.T) {
	in := readInputs(t)
	data, err := os.ReadFile(tokenizerPath(t, "small_bytelevel"))
	if err != nil {
		t.Fatal(err)
	}
	cached, err := Parse(data, WithCacheSize(64)) // tiny: forces evictions
	if err != nil {
		t.Fatal(err)
	}
	uncached, err := Parse(data, WithCacheSize(0))
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]int, len(in.Moby))
	for i, text := range in.Moby {
		want[i] = uncached.Encode(text)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for k := range in.Moby {
				i := (k + g*7) % len(in.Moby)
				if got := cached.Encode(in.Moby[i]); !slices.Equal(got, want[i]) {
					errs <- fmt.Errorf("goroutine %d, paragraph %d: cached ids differ", g, i)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSplitPatterns(t *testing.T) {
	tests := []struct {
		pat  splitPattern
		in   string
		want []string
	}{
		{patGPT2, "Hello world", []string{"Hello", " world"}},
		{patGPT2, "a   b", []string{"a", "  ", " b"}},
		{patGPT2, "a  ", []string{"a", "  "}},
		{patGPT2, "I'm 12345", []string{"I", "'m", " 12345"}},
		{patGPT2, "I'M", []string{"I", "'", "M"}},
		{patLlama3, "I'M 12345", []string{"I", "'M", " ", "123", "45"}},
		{patQwen2, "x 123", []string{"x", " ", "1", "2", "3"}},
		{patLlama3, "\"Hi\" a\r\n\r\n  b", []string{"\"Hi", "\"", " a", "\r\n\r\n", " ", " b"}},
		{patLlama3, "x  \n  ", []string{"x", "  \n", "  "}},
		{patLlama3, "...\n\nx", []string{"...\n\n", "x"}},
	}
	for _, tt := range tests {
		if got := tt.pat.split(nil, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("pattern %d split(%q) = %q, want %q", tt.pat, tt.in, got, tt.want)
		}
	}
}
