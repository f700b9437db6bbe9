package engine

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// A mistyped store path is an error, not a new empty store.
func TestModelBundleDoesNotCreateStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "typo")
	_, err := ModelBundle(context.Background(), filepath.Join(dir, "models.db"), "tiny-test")
	if !errors.Is(err, store.ErrNoStore) {
		t.Fatalf("ModelBundle on a missing store: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ModelBundle created %s: %v", dir, err)
	}
}
