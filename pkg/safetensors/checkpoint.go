package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// IndexFile is the name of a sharded checkpoint's index, which maps every
// tensor name to the shard holding it.
const IndexFile = "model.safetensors.index.json"

// Checkpoint is a directory's safetensors files seen as one set of
// tensors. Safe for concurrent use; Close is idempotent.
type Checkpoint struct {
	files []*File
	where map[string]*File
	names []string // shard order, then data order within a shard
}

// Source is what Checkpoint and File share: lookup by Hugging Face tensor
// name.
type Source interface {
	Names() []string
	Tensor(name string) (Tensor, error)
	Float32s(name string) ([]float32, error)
}

var (
	_ Source = (*File)(nil)
	_ Source = (*Checkpoint)(nil)
)

// OpenDir opens a checkpoint directory: the shards named by
// model.safetensors.index.json when present (every indexed tensor must be
// in the shard the index names), else model.safetensors, else every
// *.safetensors file. A tensor name found in two files is an error.
func OpenDir(dir string) (*Checkpoint, error) {
	files, err := shardNames(dir)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{where: map[string]*File{}}
	for _, name := range files.shards {
		f, err := Open(filepath.Join(dir, name))
		if err != nil {
			return nil, errors.Join(err, c.Close())
		}
		c.files = append(c.files, f)
		for _, t := range f.Names() {
			if other, dup := c.where[t]; dup {
				return nil, errors.Join(fmt.Errorf("%w: tensor %q in both %s and %s",
					ErrIndex, t, filepath.Base(other.Path()), name), c.Close())
			}
			c.where[t] = f
			c.names = append(c.names, t)
		}
	}
	for t, shard := range files.weightMap {
		f, ok := c.where[t]
		if !ok || filepath.Base(f.Path()) != shard {
			return nil, errors.Join(fmt.Errorf("%w: %s places tensor %q in %s, which does not hold it",
				ErrIndex, IndexFile, t, shard), c.Close())
		}
	}
	return c, nil
}

type shardList struct {
	shards    []string
	weightMap map[string]string // nil without an index
}

func shardNames(dir string) (shardList, error) {
	raw, err := os.ReadFile(filepath.Join(dir, IndexFile))
	switch {
	case err == nil:
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(raw, &idx); err != nil {
			return shardList{}, fmt.Errorf("%w: %s: %v", ErrIndex, IndexFile, err)
		}
		if len(idx.WeightMap) == 0 {
			return shardList{}, fmt.Errorf("%w: %s has no weight_map", ErrIndex, IndexFile)
		}
		var shards []string
		for t, s := range idx.WeightMap {
			// Shards must sit beside the index: a name with a path in it
			// could make a downloaded checkpoint read any file.
			if s == "" || s != filepath.Base(s) || strings.ContainsAny(s, `/\`) || s == "." || s == ".." {
				return shardList{}, fmt.Errorf("%w: tensor %q maps to shard %q, not a file name", ErrIndex, t, s)
			}
			if !slices.Contains(shards, s) {
				shards = append(shards, s)
			}
		}
		slices.Sort(shards)
		return shardList{shards: shards, weightMap: idx.WeightMap}, nil
	case !errors.Is(err, os.ErrNotExist):
		return shardList{}, fmt.Errorf("%w: %v", ErrIndex, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		return shardList{shards: []string{"model.safetensors"}}, nil
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil || len(paths) == 0 {
		return shardList{}, fmt.Errorf("%w: no .safetensors files in %s", ErrNotFound, dir)
	}
	var shards []string
	for _, p := range paths {
		shards = append(shards, filepath.Base(p))
	}
	slices.Sort(shards)
	return shardList{shards: shards}, nil
}

// Names lists every tensor: shards in name order, data order within each.
func (c *Checkpoint) Names() []string { return slices.Clone(c.names) }

// Tensor returns the named tensor from whichever shard holds it.
func (c *Checkpoint) Tensor(name string) (Tensor, error) {
	f, ok := c.where[name]
	if !ok {
		return Tensor{}, fmt.Errorf("%w: tensor %q", ErrNotFound, name)
	}
	return f.Tensor(name)
}

// Float32s returns the named tensor's values as a new []float32.
func (c *Checkpoint) Float32s(name string) ([]float32, error) {
	t, err := c.Tensor(name)
	if err != nil {
		return nil, err
	}
	return t.Float32s()
}

// Files returns the opened shards, for their metadata.
func (c *Checkpoint) Files() []*File { return slices.Clone(c.files) }

// Close closes every shard; it is idempotent.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
