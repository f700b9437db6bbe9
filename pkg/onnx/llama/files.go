package llama

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// File names WriteModel produces.
const (
	ModelFile = "model.onnx"
	DataFile  = "model.onnx.data"
)

// ExternalThreshold is WriteModel's size from which an initializer goes to
// DataFile: every weight matrix of a real model, none of the small
// constants. ONNX Runtime maps the page-aligned data file.
const ExternalThreshold = 64 << 10

// WriteModel builds the decoder into dir/model.onnx. Initializers of at
// least ExternalThreshold bytes are streamed to dir/model.onnx.data as they
// are emitted, so peak memory is about one weight matrix beyond the
// source's; the data file is removed again when nothing went to it. It
// returns the files written (base names). Cancelling ctx stops the build
// between tensors.
func WriteModel(ctx context.Context, dir string, c *Config, src WeightSource, opts Options) (files []string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	dataPath := filepath.Join(dir, DataFile)
	df, err := os.Create(dataPath)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	defer func() {
		if cerr := df.Close(); cerr != nil && !errors.Is(cerr, os.ErrClosed) {
			err = errors.Join(err, cerr)
		}
		if err != nil {
			os.Remove(dataPath)
		}
	}()
	w := bufio.NewWriterSize(df, 1<<20)
	b := onnx.NewBuilder("edgeinfer-llama")
	b.SetProducer("edgeinfer", "1")
	b.SetExternalData(w, DataFile, ExternalThreshold)
	if err := Build(b, c, ctxSource{ctx, src}, opts); err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("llama: write %s: %w", DataFile, err)
	}
	if err := df.Sync(); err != nil {
		return nil, fmt.Errorf("llama: write %s: %w", DataFile, err)
	}
	model, err := b.Marshal()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ModelFile), model, 0o644); err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	files = []string{ModelFile}
	if b.ExternalBytes() > 0 {
		files = append(files, DataFile)
	} else {
		df.Close()
		os.Remove(dataPath)
	}
	return files, nil
}

// ctxSource stops a long build when its context ends.
type ctxSource struct {
	ctx context.Context
	src WeightSource
}

func (s ctxSource) Tensor(name string) (Tensor, error) {
	if err := s.ctx.Err(); err != nil {
		return Tensor{}, fmt.Errorf("llama: build stopped: %w", err)
	}
	return s.src.Tensor(name)
}
