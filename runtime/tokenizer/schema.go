package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The subset of Hugging Face's tokenizer.json schema this package reads.
// Components are one struct holding the union of their fields; each
// component's builder reads only the fields its type defines.

type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    *componentJSON   `json:"normalizer"`
	PreTokenizer  *componentJSON   `json:"pre_tokenizer"`
	PostProcessor *componentJSON   `json:"post_processor"`
	Decoder       *componentJSON   `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
}

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type bpeModelJSON struct {
	Type                    string          `json:"type"`
	RawVocab                json.RawMessage `json:"vocab"`
	Vocab                   map[string]int  `json:"-"`
	Merges                  json.RawMessage `json:"merges"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Dropout                 *float64        `json:"dropout"`
}

type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type componentJSON struct {
	Type string `json:"type"`

	// Sequence containers.
	Normalizers   []componentJSON `json:"normalizers"`
	Pretokenizers []componentJSON `json:"pretokenizers"`
	Decoders      []componentJSON `json:"decoders"`
	Processors    []componentJSON `json:"processors"`

	// Split, Replace.
	Pattern  *patternJSON `json:"pattern"`
	Behavior string       `json:"behavior"`
	Invert   bool         `json:"invert"`
	Content  string       `json:"content"`

	// Prepend normaliser.
	Prepend string `json:"prepend"`

	// ByteLevel, Metaspace.
	AddPrefixSpace *bool  `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
	Replacement    string `json:"replacement"`
	PrependScheme  string `json:"prepend_scheme"`
	Split          *bool  `json:"split"`

	// Strip decoder.
	Start int `json:"start"`
	Stop  int `json:"stop"`

	// TemplateProcessing.
	Single        []templateItemJSON             `json:"single"`
	SpecialTokens map[string]templateSpecialJSON `json:"special_tokens"`
}

type templateItemJSON struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type templateSpecialJSON struct {
	ID  string `json:"id"`
	IDs []int  `json:"ids"`
}

// parseMerges accepts both encodings Hugging Face has used: "a b" strings
// (tokenizers < 0.20) and ["a", "b"] pairs (tokenizers >= 0.20, needed when
// a token contains a space).
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if fast, strs, ok := scanMerges(raw); ok {
		if !strs {
			return fast, nil
		}
		for i, m := range fast {
			a, b, ok := strings.Cut(m[0], " ")
			if !ok || a == "" || b == "" || strings.Contains(b, " ") {
				return nil, fmt.Errorf("merge %d %q: want two tokens separated by one space", i, m[0])
			}
			fast[i] = [2]string{a, b}
		}
		return fast, nil
	}
	// One pass in the encoding the file uses, chosen by its first item.
	body := bytes.TrimLeft(raw[1:], " \t\r\n")
	if len(body) > 0 && body[0] == '"' {
		var items []string
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, fmt.Errorf("merges: %w", err)
		}
		out := make([][2]string, len(items))
		for i, s := range items {
			a, b, ok := strings.Cut(s, " ")
			if !ok || a == "" || b == "" || strings.Contains(b, " ") {
				return nil, fmt.Errorf("merge %d %q: want two tokens separated by one space", i, s)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("merges: %w", err)
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("merge %d: want a pair, got %d items", i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}
