package build

import (
	"context"
	"fmt"
	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"io"
	"os"
	"path/filepath"

	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
)

// TokenizerFile is the tokenizer's name inside a bundle.
const TokenizerFile = "tokenizer.json"

// DecoderSpec describes a Llama-family decoder bundle to build.
type DecoderSpec struct {
	Name    string
	Version string
	Config  *llama.Config
	Weights llama.WeightSource
	Options llama.Options
	// Tokenizer is the path of a tokenizer.json to copy in, or "".
	Tokenizer string
	// Generation defaults; nil takes bos/eos from Config.
	Generation *bundle.Generation
	// Chat is the chat template to keep in the manifest, or nil.
	Chat      *bundle.Chat
	CreatedBy string
}

// BuildDecoder writes a decoder bundle into dir (created if needed): the
// graph (llama.WriteModel), the tokenizer, and a sealed manifest. It
// returns the loaded, verified bundle.
func BuildDecoder(ctx context.Context, dir string, spec DecoderSpec) (*bundle.Bundle, error) {
	c := spec.Config
	opts := spec.Options
	if opts.Contract == "" {
		opts.Contract = llama.ContractPaged
	}
	files, err := llama.WriteModel(ctx, dir, c, spec.Weights, opts)
	if err != nil {
		return nil, err
	}
	m := &bundle.Manifest{
		Name:         spec.Name,
		Version:      spec.Version,
		Kind:         bundle.KindDecoder,
		Contract:     bundle.Contract(opts.Contract),
		Model:        llama.ModelFile,
		Architecture: c.Architecture(),
		Quantization: "fp32",
		CreatedBy:    spec.CreatedBy,
		Geometry: &bundle.Geometry{
			Layers: c.NumHiddenLayers, Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads,
			HeadDim: c.HeadDim, Hidden: c.HiddenSize, Vocab: c.VocabSize,
			MaxPositions: c.MaxPositionEmbeddings, Logits: "all",
		},
		Generation: spec.Generation,
		Chat:       spec.Chat,
	}
	if opts.Emitter != nil {
		m.Quantization = opts.Emitter.Scheme()
	}
	if opts.MaxPositions > 0 {
		m.Geometry.MaxPositions = opts.MaxPositions
	}
	if opts.Contract == llama.ContractPaged {
		m.Geometry.BlockSize = opts.BlockSize
		if m.Geometry.BlockSize == 0 {
			m.Geometry.BlockSize = llama.DefaultBlockSize
		}
		if !opts.AllLogits {
			m.Geometry.Logits = "last"
		}
		if opts.KVInt8 {
			m.Geometry.KVDType = bundle.KVDTypeInt8
		}
		if opts.KVFloat16 {
			m.Geometry.KVDType = bundle.KVDTypeFloat16
		}
	}
	if m.Generation == nil {
		m.Generation = &bundle.Generation{EOSTokenIDs: c.EOSTokenID}
		if len(c.BOSTokenID) > 0 {
			m.Generation.BOSTokenID = &c.BOSTokenID[0]
		}
	}
	if spec.Tokenizer != "" {
		if err := copyFile(spec.Tokenizer, filepath.Join(dir, TokenizerFile)); err != nil {
			return nil, err
		}
		m.Tokenizer = TokenizerFile
		files = append(files, TokenizerFile)
	}
	if err := bundle.Write(dir, m, files...); err != nil {
		return nil, err
	}
	return bundle.Load(dir)
}

func copyFile(from, to string) (err error) {
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("bundle: %w", cerr)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("bundle: copy %s: %w", from, err)
	}
	return nil
}
