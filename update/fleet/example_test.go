package fleet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// Create a repository with a 2-of-3 root kept in its own directory, and
// publish the same model twice: the second release stores nothing new but
// its manifest.
func Example() {
	tmp, _ := os.MkdirTemp("", "fleet-example")
	defer os.RemoveAll(tmp)
	repo, err := fleet.Init(filepath.Join(tmp, "repo"), filepath.Join(tmp, "keys"), filepath.Join(tmp, "offline"),
		fleet.InitOptions{RootKeys: 3, RootThreshold: 2}, nil)
	if err != nil {
		panic(err)
	}
	for _, v := range []string{"1", "2"} {
		dir := filepath.Join(tmp, "bundle"+v)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "model.onnx"), make([]byte, 1<<20), 0o644)
		m := &bundle.Manifest{Name: "detector", Version: v, Kind: bundle.KindOneShot, Model: "model.onnx", Quantization: "fp32", CreatedBy: "example"}
		if err := bundle.Write(dir, m, "model.onnx"); err != nil {
			panic(err)
		}
		rel, st, err := repo.Publish(context.Background(), dir, fleet.ReleaseOptions{})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s@%s counter %d: %d files, %d new chunks\n", rel.Name, rel.Version, rel.Counter, st.Files, st.NewChunks)
	}
	// Output:
	// detector@1 counter 1: 2 files, 2 new chunks
	// detector@2 counter 2: 2 files, 1 new chunks
}
