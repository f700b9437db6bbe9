package build

import (
	"context"
	"fmt"
	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"os"
	"path/filepath"
	"strings"
)

// ImportExported makes a bundle of a model exported by someone else: a
// directory with an Optimum or onnxruntime-genai decoder (model.onnx or
// genai_config.json's decoder file, its external data, tokenizer.json,
// config.json, generation_config.json) or any one-shot .onnx model.
// Recognise decides the kind, contract and geometry; the top-level regular
// files of src are copied into out and hashed into the manifest. name and
// version default to the directory's name and "1".
func ImportExported(ctx context.Context, src, out, name, version string) (*bundle.Bundle, error) {
	m, err := Recognise(src)
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = filepath.Base(filepath.Clean(src))
	}
	if version == "" {
		version = "1"
	}
	m.Name, m.Version = name, version
	m.CreatedBy = "edgeinfer model import --onnx " + src
	entries, err := os.ReadDir(src)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !e.Type().IsRegular() || e.Name() == bundle.ManifestFile || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(out, e.Name())); err != nil {
			return nil, fmt.Errorf("bundle: import %s: %w", e.Name(), err)
		}
		files = append(files, e.Name())
		if e.Name() == TokenizerFile {
			m.Tokenizer = TokenizerFile
		}
	}
	if err := bundle.Write(out, m, files...); err != nil {
		return nil, err
	}
	return bundle.Load(out)
}
