package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
)

// ImportOptions configures ImportHF.
type ImportOptions struct {
	Name    string // default: the directory's base name
	Version string // default: "1"
	Options llama.Options
}

// hfTokenizerConfig is the part of tokenizer_config.json ImportHF keeps.
// chat_template is a string, or a list of named templates; the tokens are
// strings or AddedToken objects ({"content": …}).
type hfTokenizerConfig struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	BOSToken     json.RawMessage `json:"bos_token"`
	EOSToken     json.RawMessage `json:"eos_token"`
}

// readChatTemplate reads the chat template of hfDir/tokenizer_config.json;
// nil (no error) when the file or its chat_template is absent.
func readChatTemplate(hfDir string) (*bundle.Chat, error) {
	data, err := os.ReadFile(filepath.Join(hfDir, "tokenizer_config.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	return ParseChatTemplate(data)
}

// ParseChatTemplate reads the chat template and its bos/eos tokens from
// a Hugging Face tokenizer_config.json; nil when it has no chat_template.
// Of a list of named templates it takes "default" (else the first).
func ParseChatTemplate(tokenizerConfig []byte) (*bundle.Chat, error) {
	var c hfTokenizerConfig
	if err := json.Unmarshal(tokenizerConfig, &c); err != nil {
		return nil, fmt.Errorf("%w: tokenizer_config.json: %v", bundle.ErrManifest, err)
	}
	bad := func(field string, err error) error {
		return fmt.Errorf("%w: tokenizer_config.json: %s: %v", bundle.ErrManifest, field, err)
	}
	var chat bundle.Chat
	if len(c.ChatTemplate) == 0 || string(c.ChatTemplate) == "null" {
		return nil, nil
	}
	if err := json.Unmarshal(c.ChatTemplate, &chat.Template); err != nil {
		var named []struct {
			Name     string `json:"name"`
			Template string `json:"template"`
		}
		if err2 := json.Unmarshal(c.ChatTemplate, &named); err2 != nil || len(named) == 0 {
			return nil, bad("chat_template", errors.New("want a string or a list of {name, template}"))
		}
		chat.Template = named[0].Template
		for _, n := range named {
			if n.Name == "default" {
				chat.Template = n.Template
			}
		}
	}
	var err error
	if chat.BOSToken, err = tokenText(c.BOSToken); err != nil {
		return nil, bad("bos_token", err)
	}
	if chat.EOSToken, err = tokenText(c.EOSToken); err != nil {
		return nil, bad("eos_token", err)
	}
	return &chat, nil
}

// tokenText reads a special token given as a string, an AddedToken object
// or null.
func tokenText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", errors.New("want a string or {\"content\": …}")
	}
	return obj.Content, nil
}

// hfGeneration is the part of generation_config.json ImportHF reads.
type hfGeneration struct {
	BOSTokenID        llama.TokenIDs `json:"bos_token_id"`
	EOSTokenID        llama.TokenIDs `json:"eos_token_id"`
	PadTokenID        llama.TokenIDs `json:"pad_token_id"`
	Temperature       float64        `json:"temperature"`
	TopK              int            `json:"top_k"`
	TopP              float64        `json:"top_p"`
	RepetitionPenalty float64        `json:"repetition_penalty"`
	MaxNewTokens      int            `json:"max_new_tokens"`
}

// ImportHF builds a decoder bundle in out from a Hugging Face checkpoint
// directory: config.json, model.safetensors or shards listed in
// model.safetensors.index.json, and optionally tokenizer.json and
// generation_config.json.
func ImportHF(ctx context.Context, hfDir, out string, opts ImportOptions) (*bundle.Bundle, error) {
	raw, err := os.ReadFile(filepath.Join(hfDir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	cfg, err := llama.ParseConfig(raw)
	if err != nil {
		return nil, err
	}
	src, err := OpenSafetensors(hfDir)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	spec := DecoderSpec{
		Name:      opts.Name,
		Version:   opts.Version,
		Config:    cfg,
		Weights:   src,
		Options:   opts.Options,
		CreatedBy: "edgeinfer model import --hf " + hfDir,
	}
	if spec.Name == "" {
		spec.Name = filepath.Base(filepath.Clean(hfDir))
	}
	if spec.Version == "" {
		spec.Version = "1"
	}
	if spec.Chat, err = readChatTemplate(hfDir); err != nil {
		return nil, err
	}
	tok := filepath.Join(hfDir, TokenizerFile)
	if _, err := os.Stat(tok); err == nil {
		spec.Tokenizer = tok
	}
	if data, err := os.ReadFile(filepath.Join(hfDir, "generation_config.json")); err == nil {
		var g hfGeneration
		if err := json.Unmarshal(data, &g); err != nil {
			return nil, fmt.Errorf("%w: generation_config.json: %v", bundle.ErrManifest, err)
		}
		spec.Generation = &bundle.Generation{
			EOSTokenIDs: g.EOSTokenID, Temperature: g.Temperature, TopK: g.TopK, TopP: g.TopP,
			RepetitionPenalty: g.RepetitionPenalty, MaxNewTokens: g.MaxNewTokens,
		}
		if len(g.EOSTokenID) == 0 {
			spec.Generation.EOSTokenIDs = cfg.EOSTokenID
		}
		if len(g.BOSTokenID) > 0 {
			spec.Generation.BOSTokenID = &g.BOSTokenID[0]
		} else if len(cfg.BOSTokenID) > 0 {
			spec.Generation.BOSTokenID = &cfg.BOSTokenID[0]
		}
		if len(g.PadTokenID) > 0 {
			spec.Generation.PadTokenID = &g.PadTokenID[0]
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	return BuildDecoder(ctx, out, spec)
}
