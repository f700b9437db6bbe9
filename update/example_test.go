package update_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// A fleet publishes a bundle; a device pinned to the repository's first
// root installs it from the static files.
func Example() {
	ctx := context.Background()
	tmp, _ := os.MkdirTemp("", "update-example")
	defer os.RemoveAll(tmp)

	// Release side: keys, a repository, a bundle published into it.
	repo, err := fleet.Init(filepath.Join(tmp, "repo"), filepath.Join(tmp, "keys"), "", fleet.InitOptions{}, nil)
	if err != nil {
		panic(err)
	}
	b := filepath.Join(tmp, "bundle")
	os.MkdirAll(b, 0o755)
	os.WriteFile(filepath.Join(b, "model.onnx"), []byte("weights"), 0o644)
	m := &bundle.Manifest{Name: "detector", Version: "1", Kind: bundle.KindOneShot, Model: "model.onnx", Quantization: "fp32", CreatedBy: "example"}
	if err := bundle.Write(b, m, "model.onnx"); err != nil {
		panic(err)
	}
	if _, _, err := repo.Publish(ctx, b, fleet.ReleaseOptions{Boards: []string{"rpi5"}}); err != nil {
		panic(err)
	}

	// Device side: its store, the pinned root, the repository as a source.
	st, err := store.Open(ctx, filepath.Join(tmp, "device.db"), store.Options{})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	agent, err := update.New(update.Config{Model: "detector", ImageRoot: repo.RootPath(update.RepoImage),
		Device: update.Device{Board: "rpi5"}},
		update.Deps{Store: st, Source: update.FileSource{Dir: filepath.Join(tmp, "repo")},
			Events: update.EventFunc(func(_ context.Context, e update.Event) error {
				fmt.Println(e.Kind, e.Model, e.Version)
				return nil
			})})
	if err != nil {
		panic(err)
	}
	ref, err := agent.Apply(ctx)
	fmt.Println(ref, err)
	// Output:
	// offered detector 1
	// downloading detector 1
	// downloading detector 1
	// verified detector 1
	// staged detector 1
	// active detector 1
	// detector@1 <nil>
}
