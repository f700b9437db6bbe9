package device

import (
	"context"
	"errors"
	"fmt"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/update"
)

// The engine's run-time swap is the update.Activator of a device that
// serves while it updates (EngineActivator); CheckActivator checks a
// version in an engine of its own where none serves in the same process
// (the CLI).

// EngineActivator switches a serving engine with its run-time swap: the
// new version loads beside the running one, the check runs against it,
// then new requests go to it while running ones finish on the old.
// Versions are handed to the engine as exported directories, not store
// references: the agent holds the store open, and a store file is opened
// by one holder at a time.
type EngineActivator struct {
	Engine *engine.Engine
	Store  *store.Store
}

// Swap implements update.Activator. A model the engine does not serve yet is
// loaded, checked, and unloaded again if the check fails.
func (a EngineActivator) Swap(ctx context.Context, ref store.Ref, check update.Check) error {
	dir, err := exportVersion(ctx, a.Store, ref)
	if err != nil {
		return err
	}
	spec := engine.ModelSpec{Name: ref.Name, Dir: dir}
	var hc engine.HealthCheck
	if check != nil {
		hc = func(ctx context.Context, e *engine.Engine, staged string) error {
			return check(ctx, engineGenerator{e}, staged)
		}
	}
	_, err = a.Engine.Swap(ctx, ref.Name, spec, hc)
	if !errors.Is(err, engine.ErrUnknownModel) {
		return err
	}
	if _, err := a.Engine.Load(ctx, spec); err != nil {
		return fmt.Errorf("%w: %s does not load: %w", update.ErrHealth, ref, err)
	}
	if hc != nil {
		if err := hc(ctx, a.Engine, ref.Name); err != nil {
			return errors.Join(err, a.Engine.Unload(ctx, ref.Name))
		}
	}
	return nil
}

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
func (a CheckActivator) Swap(ctx context.Context, ref store.Ref, check update.Check) error {
	if check == nil {
		return nil
	}
	dir, err := exportVersion(ctx, a.Store, ref)
	if err != nil {
		return err
	}
	// The version loads in an engine of its own, under its own name: no
	// other version of it is there to tell it apart from.
	cfg := a.Engine
	cfg.Models = []engine.ModelSpec{{Name: ref.Name, Dir: dir}}
	cfg.Store = ""
	cfg.PrefixPersist.Disable = true // the check's prompts are not the device's
	e, err := engine.Open(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%w: %s does not load: %w", update.ErrHealth, ref, err)
	}
	return errors.Join(check(ctx, engineGenerator{e}, ref.Name), e.Close(ctx))
}

// exportVersion materialises a stored version where the engine looks for
// it (engine.StoredBundle: <store>.models/<name>@<version>), so the
// serving process later opens the same verified copy.
func exportVersion(ctx context.Context, st *store.Store, ref store.Ref) (string, error) {
	b, err := engine.StoredBundle(ctx, st, ref.String())
	if err != nil {
		return "", fmt.Errorf("update: export %s: %w", ref, err)
	}
	return b.Dir, nil
}

// engineGenerator runs golden requests on an engine.
type engineGenerator struct{ e *engine.Engine }

// GenerateGreedy implements Generator (zero sampling parameters: greedy).
func (g engineGenerator) GenerateGreedy(ctx context.Context, name, prompt string, promptTokens []int32, maxTokens int) ([]int32, error) {
	opts := engine.GenerateOptions{MaxTokens: maxTokens, Sampling: &engine.Sampling{}} // greedy, whatever the bundle says
	var s *engine.Stream
	if prompt != "" {
		s = g.e.Generate(ctx, name, prompt, opts)
	} else {
		s = g.e.GenerateTokens(ctx, name, promptTokens, opts)
	}
	var out []int32
	for tok, err := range s.Tokens() {
		if err != nil {
			return out, err
		}
		if tok.Index >= 0 {
			out = append(out, tok.ID)
		}
	}
	return out, nil
}
