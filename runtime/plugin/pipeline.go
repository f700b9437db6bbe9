package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

// Pipeline is a bundle's pre and post plugins, ready to run around its
// model: Pre turns a request into model inputs (and tensors passed along
// to Post), Post turns model outputs into results. Either stage may be
// absent: then tensors pass through unchanged.
//
// A Pipeline is safe for concurrent use.
type Pipeline struct {
	pre, post *stage
}

type stage struct {
	p    *Plugin
	args []abi.Tensor
}

// OpenPipeline loads b's plugins (b was verified by bundle.Load, so their
// bytes are the manifest's). base supplies what the manifest does not:
// the cache directory, the engine, MaxInstances.
func OpenPipeline(ctx context.Context, b *bundle.Bundle, base Config) (*Pipeline, error) {
	pl := &Pipeline{}
	ps := b.Manifest.Plugins
	if ps == nil {
		return pl, nil
	}
	var err error
	if ps.Pre != nil {
		if pl.pre, err = openStage(ctx, b, ps.Pre, base); err != nil {
			return nil, err
		}
	}
	if ps.Post != nil {
		if pl.post, err = openStage(ctx, b, ps.Post, base); err != nil {
			return nil, errors.Join(err, pl.Close(ctx))
		}
	}
	return pl, nil
}

func openStage(ctx context.Context, b *bundle.Bundle, r *bundle.PluginRef, base Config) (*stage, error) {
	cfg := base
	cfg.MemoryMB = r.MemoryMB
	cfg.CallTimeout = time.Duration(r.TimeoutMS) * time.Millisecond
	cfg.Grants = Grants{Clock: r.Clock, Random: r.Random}
	for _, d := range r.Dirs {
		host, err := filepath.Abs(b.Path(d.Dir))
		if err != nil {
			return nil, fmt.Errorf("plugin %s: %w", r.File, err)
		}
		cfg.Grants.Dirs = append(cfg.Grants.Dirs, Mount{Host: host, Guest: d.Guest})
	}
	p, err := LoadFile(ctx, b.Path(r.File), cfg)
	if err != nil {
		return nil, err
	}
	s := &stage{p: p}
	for _, k := range slices.Sorted(maps.Keys(r.Args)) {
		s.args = append(s.args, abi.Str("arg."+k, r.Args[k]))
	}
	return s, nil
}

func (s *stage) call(ctx context.Context, in []abi.Tensor) ([]abi.Tensor, error) {
	if s == nil {
		return in, nil
	}
	return s.p.Call(ctx, append(slices.Clip(in), s.args...))
}

// HasPre and HasPost report which stages the bundle has.
func (pl *Pipeline) HasPre() bool  { return pl.pre != nil }
func (pl *Pipeline) HasPost() bool { return pl.post != nil }

// Pre runs the pre plugin on a request. Its outputs named in modelInputs
// are returned as model; the others as pass, for Post. Without a pre
// plugin the request itself is split so.
func (pl *Pipeline) Pre(ctx context.Context, in []abi.Tensor, modelInputs []string) (model, pass []abi.Tensor, err error) {
	out, err := pl.pre.call(ctx, in)
	if err != nil {
		return nil, nil, fmt.Errorf("pre: %w", err)
	}
	for _, t := range out {
		if slices.Contains(modelInputs, t.Name) {
			model = append(model, t)
		} else {
			pass = append(pass, t)
		}
	}
	for _, n := range modelInputs {
		if _, ok := abi.Find(model, n); !ok {
			return nil, nil, fmt.Errorf("pre: %w: the model needs input %q and the pre plugin gave %v", ErrResult, n, names(out))
		}
	}
	return model, pass, nil
}

// Post runs the post plugin on the model's outputs and Pre's pass
// tensors; without a post plugin those are the result.
func (pl *Pipeline) Post(ctx context.Context, modelOut, pass []abi.Tensor) ([]abi.Tensor, error) {
	out, err := pl.post.call(ctx, append(slices.Clip(modelOut), pass...))
	if err != nil {
		return nil, fmt.Errorf("post: %w", err)
	}
	return out, nil
}

// Infos describes the loaded plugins (for reports and the version matrix).
func (pl *Pipeline) Infos() map[string]Info {
	m := map[string]Info{}
	if pl.pre != nil {
		m["pre"] = pl.pre.p.Info()
	}
	if pl.post != nil {
		m["post"] = pl.post.p.Info()
	}
	return m
}

// Close closes both plugins; it is idempotent.
func (pl *Pipeline) Close(ctx context.Context) error {
	var errs []error
	for _, s := range []*stage{pl.pre, pl.post} {
		if s != nil {
			errs = append(errs, s.p.Close(ctx))
		}
	}
	return errors.Join(errs...)
}

func names(ts []abi.Tensor) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.String()
	}
	return out
}
