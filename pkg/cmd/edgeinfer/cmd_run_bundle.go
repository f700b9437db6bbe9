package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/plugin"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

// pluginBundle reports whether path is a bundle directory whose manifest
// lists plugins: `edgeinfer run` then runs pre -> model -> post.
func pluginBundle(path string) bool {
	data, err := os.ReadFile(filepath.Join(path, bundle.ManifestFile))
	if err != nil {
		return false
	}
	m, err := bundle.ParseManifest(data)
	return err == nil && m.Plugins != nil
}

// runBundle runs a one-shot bundle's pipeline on one input file (an
// image for a vision bundle) and prints each stage's time and the result.
func runBundle(ctx context.Context, w io.Writer, dir string, inputs []string, opts ort.Options) error {
	if len(inputs) != 1 {
		return fmt.Errorf("%w: run BUNDLE --input FILE (one file, given to the pre plugin as uint8 tensor \"image\", or NAME=FILE)", errUsage)
	}
	b, err := bundle.Load(dir)
	if err != nil {
		return err
	}
	if b.Manifest.Kind != bundle.KindOneShot {
		return fmt.Errorf("%w: run BUNDLE runs one-shot bundles; %s is a %s (use generate)", errUsage, dir, b.Manifest.Kind)
	}
	name, file, ok := strings.Cut(inputs[0], "=")
	if !ok {
		name, file = "image", inputs[0]
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	pl, err := plugin.OpenPipeline(ctx, b, plugin.Config{MaxInstances: 1})
	if err != nil {
		return err
	}
	defer pl.Close(context.WithoutCancel(ctx))
	infos := pl.Infos()
	for _, stage := range []string{"pre", "post"} {
		info, ok := infos[stage]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "%s plugin: %s (wazero %s, %s, compile %.1f ms)\n", stage, info.Name, info.Wazero, info.Engine, ms(info.Compile))
	}
	s, err := ort.NewSessionFromFile(ctx, b.ModelPath(), opts)
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintf(w, "model: %s %s, provider %s\n", b.Manifest.Name, b.Manifest.Version, s.Provider())
	var modelInputs []string
	for _, v := range s.Inputs() {
		modelInputs = append(modelInputs, v.Name)
	}

	t0 := time.Now()
	feeds, pass, err := pl.Pre(ctx, []abi.Tensor{abi.Bytes(name, data)}, modelInputs)
	if err != nil {
		return err
	}
	t1 := time.Now()
	in, err := toORT(feeds)
	defer ort.CloseAll(in)
	if err != nil {
		return err
	}
	res, err := s.Run(ctx, in)
	if err != nil {
		return err
	}
	defer ort.CloseAll(res)
	outs, err := fromORT(res)
	if err != nil {
		return err
	}
	t2 := time.Now()
	result, err := pl.Post(ctx, outs, pass)
	if err != nil {
		return err
	}
	t3 := time.Now()
	fmt.Fprintf(w, "time: pre %.2f ms  model %.2f ms  post %.2f ms\n", ms(t1.Sub(t0)), ms(t2.Sub(t1)), ms(t3.Sub(t2)))
	printTensors(w, "result", result)
	return nil
}

// toORT copies plugin tensors into ONNX Runtime tensors (float32, int64,
// int32, uint8, float64).
func toORT(ts []abi.Tensor) (map[string]*ort.Tensor, error) {
	m := map[string]*ort.Tensor{}
	for _, t := range ts {
		var dt ort.DType
		switch t.DType {
		case abi.Float32:
			dt = ort.Float32
		case abi.Int64:
			dt = ort.Int64
		case abi.Int32:
			dt = ort.Int32
		case abi.Uint8:
			dt = ort.Uint8
		case abi.Float64:
			dt = ort.Float64
		default:
			return m, fmt.Errorf("tensor %s: %s cannot feed a model", t.Name, t.DType)
		}
		o, err := ort.CopyBytes(dt, t.Shape, t.Data)
		if err != nil {
			return m, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		m[t.Name] = o
	}
	return m, nil
}

// fromORT copies model outputs into plugin tensors.
func fromORT(m map[string]*ort.Tensor) ([]abi.Tensor, error) {
	var out []abi.Tensor
	for name, t := range m {
		var dt abi.DType
		switch t.DType() {
		case ort.Float32:
			dt = abi.Float32
		case ort.Int64:
			dt = abi.Int64
		case ort.Int32:
			dt = abi.Int32
		case ort.Uint8:
			dt = abi.Uint8
		case ort.Float64:
			dt = abi.Float64
		default:
			return nil, errors.New("output " + name + ": " + t.DType().String() + " has no plugin dtype")
		}
		out = append(out, abi.Tensor{Name: name, DType: dt, Shape: t.Shape(), Data: append([]byte(nil), t.Bytes()...)})
	}
	return out, nil
}
