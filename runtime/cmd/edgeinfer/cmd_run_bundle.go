//go:build cgo

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
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
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
// image for a vision bundle) through the engine, as an application would
// (engine.InferTensors), and prints each stage's time and the result.
func runBundle(ctx context.Context, w io.Writer, dir string, inputs []string, opts ort.Options, warmup, runs int) (err error) {
	if len(inputs) != 1 {
		return fmt.Errorf("%w: run BUNDLE --input FILE (one file, given to the pre plugin as uint8 tensor \"image\", or NAME=FILE)", errUsage)
	}
	name, file, ok := strings.Cut(inputs[0], "=")
	if !ok {
		name, file = "image", inputs[0]
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	e, err := engine.Open(ctx, engine.Config{Models: []engine.ModelSpec{{Dir: dir}}, Session: opts})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, e.Close(context.WithoutCancel(ctx))) }()
	info := e.Models()[0]
	if info.Kind != string(bundle.KindOneShot) {
		return fmt.Errorf("%w: run BUNDLE runs one-shot bundles; %s is a %s (use generate)", errUsage, dir, info.Kind)
	}
	for _, stage := range []string{"pre", "post"} {
		if pi, ok := info.Plugins[stage]; ok {
			fmt.Fprintf(w, "%s plugin: %s (wazero %s, %s, compile %.1f ms)\n", stage, pi.Name, pi.Wazero, pi.Engine, ms(pi.Compile))
		}
	}
	fmt.Fprintf(w, "model: %s %s, provider %s\n", info.Name, info.Version, info.Provider)
	records := make(chan *engine.Record, 1)
	defer e.Observe(recordChan(records))()
	// The first request apart (instances start, buffers grow), then the
	// stages' percentiles over the timed runs after the warm-up.
	var result []abi.Tensor
	var pre, model, post []time.Duration
	for i := range 1 + warmup + runs {
		if result, err = e.InferTensors(ctx, info.Name, []abi.Tensor{abi.Bytes(name, data)}, engine.InferOptions{}); err != nil {
			return err
		}
		var r *engine.Record
		select {
		case r = <-records:
		case <-time.After(5 * time.Second):
			return errors.New("run: the request's record never came")
		}
		if i == 0 {
			fmt.Fprintf(w, "first request: pre %.2f ms  model %.2f ms  post %.2f ms\n", ms(r.Pre), ms(r.Finished.Sub(r.Arrived)), ms(r.Post))
		} else if i > warmup {
			pre, model, post = append(pre, r.Pre), append(model, r.Finished.Sub(r.Arrived)), append(post, r.Post)
		}
	}
	p, m, q := percentiles(pre), percentiles(model), percentiles(post)
	fmt.Fprintf(w, "time over %d runs (after %d warm-up), p50 (p90): pre %.2f (%.2f) ms  model %.2f (%.2f) ms  post %.2f (%.2f) ms\n",
		runs, warmup, p(50), p(90), m(50), m(90), q(50), q(90))
	printTensors(w, "result", result)
	return nil
}

// recordChan is an engine observer handing records to a channel.
type recordChan chan *engine.Record

func (c recordChan) ObserveTimeline(r *engine.Record) {
	select {
	case c <- r:
	default:
	}
}
