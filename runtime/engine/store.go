package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// ModelDir resolves a store reference ("name" for the active version, or
// "name@version") to a verified bundle directory beside the store file
// (<store>.models/<name>@<version>/), exporting it from the store the first
// time. ONNX Runtime wants paths (external weights sit next to the model),
// so the store's chunks become plain files once per version; every later
// open reuses them after bundle.Load has re-checked their digests, and a
// damaged copy is exported again. The store is closed before the model
// runs, so an update agent can write to it meanwhile. No network is used.
func ModelDir(ctx context.Context, storePath, ref string) (string, error) {
	st, err := store.Open(ctx, storePath, store.Options{})
	if err != nil {
		return "", fmt.Errorf("engine: open store: %w", err)
	}
	defer st.Close()
	v, err := st.Resolve(ctx, ref)
	if err != nil {
		return "", fmt.Errorf("engine: model %q: %w", ref, err)
	}
	dir := filepath.Join(storePath+".models", v.Name+"@"+v.Version)
	if _, err := bundle.Load(dir); err == nil {
		return dir, nil
	}
	tmp := dir + ".export"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if _, err := st.Export(ctx, ref, tmp); err != nil {
		return "", errors.Join(fmt.Errorf("engine: export %s from the store: %w", ref, err), os.RemoveAll(tmp))
	}
	if _, err := bundle.Load(tmp); err != nil {
		return "", errors.Join(fmt.Errorf("engine: %s as exported: %w", ref, err), os.RemoveAll(tmp))
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("engine: publish %s: %w", dir, err)
	}
	return dir, nil
}
