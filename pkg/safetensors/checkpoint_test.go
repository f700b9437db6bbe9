package safetensors

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestOpenDirSharded(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "model-00001-of-00002.safetensors", []Tensor{
		FromFloat32s("model.embed_tokens.weight", []int{2, 2}, []float32{1, 2, 3, 4}),
	}, nil)
	writeFile(t, dir, "model-00002-of-00002.safetensors", []Tensor{
		FromFloat32s("lm_head.weight", []int{2, 2}, []float32{5, 6, 7, 8}),
		FromFloat32s("model.norm.weight", []int{2}, []float32{1, 1}),
	}, nil)
	index := `{"metadata":{"total_size":40},"weight_map":{
		"model.embed_tokens.weight":"model-00001-of-00002.safetensors",
		"lm_head.weight":"model-00002-of-00002.safetensors",
		"model.norm.weight":"model-00002-of-00002.safetensors"}}`
	os.WriteFile(filepath.Join(dir, IndexFile), []byte(index), 0o644)

	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Names(); !slices.Equal(got, []string{"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"}) {
		t.Errorf("Names = %v", got)
	}
	if v, err := c.Float32s("lm_head.weight"); err != nil || !slices.Equal(v, []float32{5, 6, 7, 8}) {
		t.Errorf("lm_head = %v, %v", v, err)
	}
	if _, err := c.Tensor("missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
	if len(c.Files()) != 2 {
		t.Errorf("%d files", len(c.Files()))
	}
	if err := errors.Join(c.Close(), c.Close()); err != nil {
		t.Errorf("Close twice: %v", err)
	}
}

func TestOpenDirErrors(t *testing.T) {
	shard := []Tensor{FromFloat32s("a", []int{1}, []float32{1})}
	tests := []struct {
		name  string
		setup func(dir string)
		want  error
		msg   string
	}{
		{"empty dir", func(string) {}, ErrNotFound, "no .safetensors"},
		{"bad index json", func(dir string) {
			os.WriteFile(filepath.Join(dir, IndexFile), []byte("{"), 0o644)
		}, ErrIndex, IndexFile},
		{"path in shard name", func(dir string) {
			os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":{"a":"../x.safetensors"}}`), 0o644)
		}, ErrIndex, "not a file name"},
		{"index names wrong shard", func(dir string) {
			writeFile(t, dir, "one.safetensors", shard, nil)
			writeFile(t, dir, "two.safetensors", []Tensor{FromFloat32s("b", []int{1}, []float32{1})}, nil)
			os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":{"a":"two.safetensors","b":"one.safetensors"}}`), 0o644)
		}, ErrIndex, "does not hold it"},
		{"duplicate across files", func(dir string) {
			writeFile(t, dir, "one.safetensors", shard, nil)
			writeFile(t, dir, "two.safetensors", shard, nil)
		}, ErrIndex, `tensor "a" in both`},
		{"corrupt shard", func(dir string) {
			os.WriteFile(filepath.Join(dir, "model.safetensors"), rawFile(`{"a":1}`, 0), 0o644)
		}, ErrHeader, "model.safetensors"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(dir)
			c, err := OpenDir(dir)
			if err == nil {
				c.Close()
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, want %v containing %q", err, tc.want, tc.msg)
			}
		})
	}
}

func TestOpenDirSingleAndGlob(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "weights.safetensors", []Tensor{FromFloat32s("a", []int{1}, []float32{2})}, nil)
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Float32s("a"); !slices.Equal(v, []float32{2}) {
		t.Errorf("a = %v", v)
	}
	c.Close()
}
