package engine

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// ModelBundle resolves a store reference ("name" for the active version, or
// "name@version") to a verified bundle directory beside the store file
// (<store>.models/<name>@<version>/), exporting it from the store the first
// time. ONNX Runtime wants paths (external weights sit next to the model),
// so the store's chunks become plain files once per version; every later
// open reuses them after bundle.Load has re-checked their digests, and a
// damaged copy is exported again. The store is closed before the model
// runs, so an update agent can write to it meanwhile. No network is used.
//
// It returns the loaded (verified) bundle, so the caller does not hash the
// files a second time.
func ModelBundle(ctx context.Context, storePath, ref string) (*bundle.Bundle, error) {
	st, err := store.Open(ctx, storePath, store.Options{MustExist: true})
	if err != nil {
		return nil, fmt.Errorf("engine: open store: %w", err)
	}
	defer st.Close()
	return StoredBundle(ctx, st, ref)
}

// StoredBundle is ModelBundle for a store the caller holds open (an update
// agent, which keeps its store for the whole run): the same directory,
// exported the same way, so the engine and the agent never disagree on
// where a version lives. Give the returned bundle's Dir to a ModelSpec.
func StoredBundle(ctx context.Context, st *store.Store, ref string) (*bundle.Bundle, error) {
	v, err := st.Resolve(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("engine: model %q: %w", ref, err)
	}
	dir := st.ExportDir(v.Ref())
	if b, err := bundle.Load(dir); err == nil {
		return b, nil
	}
	tmp := dir + ".export"
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	if _, err := st.Export(ctx, v.Name+"@"+v.Version, tmp); err != nil {
		return nil, errors.Join(fmt.Errorf("engine: export %s from the store: %w", ref, err), os.RemoveAll(tmp))
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("engine: publish %s: %w", dir, err)
	}
	// Export checked every file against its digest while writing it; Load
	// checks the manifest's digests of the published copy.
	return bundle.Load(dir)
}
