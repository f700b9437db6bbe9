package update

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// This file is the agent's only contact with the engine.
//
// The engine's run-time swap (e.Swap(ctx, name, spec, check)) is the
// Activator of a device that serves while it updates; until it is there,
// CheckActivator loads the staged version in an engine of its own, runs
// the check there and leaves the switch to the store's active pointer,
// which the serving process reads when it next opens the model.

// CheckActivator health-checks a staged version in an engine of its own.
// It is what `edgeinfer update apply` uses on a device where no engine runs
// in the same process.
type CheckActivator struct {
	Store *store.Store
	// Engine is the engine configuration (threads, providers); its Models
	// and Store are set here.
	Engine engine.Config
}

// Swap implements Activator: a nil check (a rollback) has nothing to load.
func (a CheckActivator) Swap(ctx context.Context, ref store.Ref, check Check) error {
	if check == nil {
		return nil
	}
	dir, err := exportVersion(ctx, a.Store, ref)
	if err != nil {
		return err
	}
	staged := ref.Name + "@staged"
	cfg := a.Engine
	cfg.Models = []engine.ModelSpec{{Name: staged, Dir: dir}}
	cfg.Store = ""
	e, err := engine.Open(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%w: %s does not load: %w", ErrHealth, ref, err)
	}
	return errors.Join(check(ctx, engineGenerator{e}, staged), e.Close(ctx))
}

// exportVersion materialises a stored version where engine.ModelBundle
// looks for it (<store>.models/<name>@<version>), so the serving process
// later opens the same verified copy.
func exportVersion(ctx context.Context, st *store.Store, ref store.Ref) (string, error) {
	dir := filepath.Join(st.Path()+".models", ref.Name+"@"+ref.Version)
	if _, err := bundle.Load(dir); err == nil {
		return dir, nil
	}
	tmp := dir + ".export"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if _, err := st.Export(ctx, ref.String(), tmp); err != nil {
		return "", errors.Join(fmt.Errorf("update: export %s: %w", ref, err), os.RemoveAll(tmp))
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// engineGenerator runs golden requests on an engine.
type engineGenerator struct{ e *engine.Engine }

// GenerateGreedy implements Generator (zero sampling parameters: greedy).
func (g engineGenerator) GenerateGreedy(ctx context.Context, name, prompt string, promptTokens []int32, maxTokens int) ([]int32, error) {
	opts := engine.GenerateOptions{MaxTokens: maxTokens}
	seq := g.e.Generate(ctx, name, prompt, opts)
	if prompt == "" {
		seq = g.e.GenerateTokens(ctx, name, promptTokens, opts)
	}
	var out []int32
	for tok, err := range seq {
		if err != nil {
			return out, err
		}
		if tok.Index >= 0 {
			out = append(out, tok.ID)
		}
	}
	return out, nil
}
