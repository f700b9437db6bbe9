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
