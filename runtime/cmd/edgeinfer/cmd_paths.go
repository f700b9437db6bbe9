package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// Arguments that name files are checked before any work starts, so that a
// typo reads as what it is rather than as whatever the first library to
// trip over it says.

// needPath reports a path that does not exist as "no such file or
// directory: PATH" and returns its FileInfo otherwise.
func needPath(p string) (fs.FileInfo, error) {
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no such file or directory: %s", p)
	}
	if err != nil {
		return nil, err
	}
	return fi, nil
}

// needBundleDir checks that p is a directory: a bundle is one.
func needBundleDir(p string) error {
	fi, err := needPath(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is a file, not a bundle directory (a bundle is a directory holding edgeinfer.json; use --store FILE for a model in the store)", p)
	}
	return nil
}

// needFile checks that p exists and is not a directory.
func needFile(p string) error {
	fi, err := needPath(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory, want a file", p)
	}
	return nil
}

// needStore checks that the store file exists: commands that only read it
// must not create an empty one (where every model would look missing).
func needStore(p string) error {
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return noStore(p)
	}
	return nil
}

func noStore(p string) error {
	return fmt.Errorf("store %s does not exist (create it with `edgeinfer models --store %s import DIR`)", p, p)
}

// openStore opens the store for a command; only create (import) may make a
// new one.
func openStore(ctx context.Context, p string, create bool) (*store.Store, error) {
	s, err := store.Open(ctx, p, store.Options{MustExist: !create})
	if errors.Is(err, store.ErrNoStore) {
		return nil, noStore(p)
	}
	return s, err
}
