package store_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"

	"github.com/edgeinfer/edgeinfer/pkg/store"
)

func Example() {
	ctx := context.Background()
	tmp, _ := os.MkdirTemp("", "store-example")
	defer os.RemoveAll(tmp)

	// A bundle: edgeinfer.json names it and vouches for each file's size
	// and sha256 (pkg/bundle writes it); a file that disagrees is refused.
	bundle := filepath.Join(tmp, "bundle")
	os.MkdirAll(bundle, 0o755)
	model := []byte("onnx bytes")
	os.WriteFile(filepath.Join(bundle, "model.onnx"), model, 0o644)
	manifest := fmt.Sprintf(`{"name":"tiny","version":"1","files":[{"path":"model.onnx","size":%d,"sha256":"%x"}]}`,
		len(model), sha256.Sum256(model))
	os.WriteFile(filepath.Join(bundle, "edgeinfer.json"), []byte(manifest), 0o644)

	s, err := store.Open(ctx, filepath.Join(tmp, "models.db"), store.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	ref, err := s.Import(ctx, bundle, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("imported", ref)

	// A bare name reads the active version.
	b, err := s.ReadFile(ctx, "tiny", "model.onnx")
	fmt.Printf("%s %v\n", b, err)

	// Another owner (an MQTT outbox) keeps its data in its own bucket.
	s.Update(ctx, "outbox", func(tx *store.Tx) error {
		_, err := tx.Append([]byte("hello"))
		return err
	})
	s.View(ctx, "outbox", func(tx *store.Tx) error {
		return tx.ForEach(nil, func(k, v []byte) (bool, error) {
			fmt.Printf("outbox %x %s\n", k, v)
			return true, nil
		})
	})
	// Output:
	// imported tiny@1
	// onnx bytes <nil>
	// outbox 0000000000000001 hello
}
