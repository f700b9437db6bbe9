//go:build cgo

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// What `run` checks before it feeds a model: it runs one-shot models on
// given or random inputs, so anything it would otherwise fill in silently
// (an input name it does not know, a dimension no input has, a decoder that
// needs a KV cache) is an error naming what the model really has.

// oneShotModel resolves run's argument: an .onnx file, or a bundle
// directory whose manifest names its model. A decoder, by its bundle's
// manifest, is refused before anything is loaded.
func oneShotModel(arg string) (string, error) {
	fi, err := needPath(arg)
	if err != nil {
		return "", err
	}
	dir, model := filepath.Dir(arg), arg
	if fi.IsDir() {
		dir, model = arg, ""
	}
	data, err := os.ReadFile(filepath.Join(dir, bundle.ManifestFile))
	if err != nil {
		if model == "" {
			return "", fmt.Errorf("%s is a directory without %s: give the .onnx file", arg, bundle.ManifestFile)
		}
		return model, nil // a bare model file
	}
	m, err := bundle.ParseManifest(data)
	if err != nil {
		if model == "" {
			return "", err
		}
		return model, nil // not our bundle: judge the file by itself
	}
	if model != "" && filepath.Base(model) != filepath.Base(m.Model) {
		return model, nil // another file of the directory
	}
	if m.Kind == bundle.KindDecoder {
		return "", errDecoder(arg)
	}
	return filepath.Join(dir, filepath.FromSlash(m.Model)), nil
}

// isDecoder recognises the decoder contracts by what a session declares:
// the SDK's metadata, the paged graph's block tables, or the compatible
// graph's past key values.
func isDecoder(info ort.ModelInfo) bool {
	if info.Metadata["edgeinfer.contract"] != "" {
		return true
	}
	for _, in := range info.Inputs {
		if in.Name == "block_tables" || strings.HasPrefix(in.Name, "past_key_values.") {
			return true
		}
	}
	return false
}

func errDecoder(model string) error {
	return fmt.Errorf("%s: this is a decoder: use `edgeinfer generate --model BUNDLE_DIR --prompt TEXT` (run feeds one-shot models; a decoder needs the engine's KV cache)", model)
}

func hasInput(inputs []ort.ValueInfo, name string) bool {
	return slices.ContainsFunc(inputs, func(v ort.ValueInfo) bool { return v.Name == name })
}

// checkDims refuses a --dim that names no symbolic dimension of any input.
func checkDims(inputs []ort.ValueInfo, dims map[string]int64) error {
	var known []string
	for _, v := range inputs {
		for _, d := range v.DimNames {
			if d != "" && !slices.Contains(known, d) {
				known = append(known, d)
			}
		}
	}
	for name := range dims {
		if !slices.Contains(known, name) {
			have := "none"
			if len(known) > 0 {
				have = strings.Join(known, ", ")
			}
			return fmt.Errorf("%w: --dim %s: no input has a dimension %q; symbolic dimensions: %s; inputs: %s", errUsage, name, name, have, describeInputs(inputs))
		}
	}
	return nil
}

func describeInputs(inputs []ort.ValueInfo) string {
	parts := make([]string, len(inputs))
	for i, v := range inputs {
		parts[i] = v.String()
	}
	return strings.Join(parts, ", ")
}
