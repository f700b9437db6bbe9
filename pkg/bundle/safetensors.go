package bundle

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
)

// ErrSafetensors reports an unreadable or malformed safetensors file.
var ErrSafetensors = errors.New("bundle: invalid safetensors")

// maxHeader bounds a safetensors JSON header (the format's own limit).
const maxHeader = 100 << 20

// SafetensorsSource is a llama.WeightSource over a checkpoint's
// safetensors files, single or sharded. Each Tensor call reads that
// tensor's bytes and converts F32, F16 or BF16 to float32, so memory holds
// one tensor at a time. Safe for concurrent use; Close is idempotent.
//
// It reads just what the importer needs; pkg/safetensors is the general
// reader and writer.
type SafetensorsSource struct {
	mu      sync.Mutex
	files   []*os.File
	tensors map[string]stEntry
}

type stEntry struct {
	file   *os.File
	name   string // file base name, for errors
	dtype  string
	shape  []int
	offset int64 // absolute
	size   int64
}

// OpenSafetensors opens the shards listed in dir/model.safetensors.index.json,
// or else every *.safetensors file in dir.
func OpenSafetensors(dir string) (*SafetensorsSource, error) {
	var paths []string
	if data, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json")); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(data, &idx); err != nil {
			return nil, fmt.Errorf("%w: model.safetensors.index.json: %v", ErrSafetensors, err)
		}
		for _, f := range idx.WeightMap {
			if !safePath(f) {
				return nil, fmt.Errorf("%w: index names shard %q", ErrSafetensors, f)
			}
			if !slices.Contains(paths, filepath.Join(dir, f)) {
				paths = append(paths, filepath.Join(dir, f))
			}
		}
	} else {
		paths, _ = filepath.Glob(filepath.Join(dir, "*.safetensors"))
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no .safetensors files in %s", ErrSafetensors, dir)
	}
	slices.Sort(paths)
	s := &SafetensorsSource{tensors: map[string]stEntry{}}
	for _, p := range paths {
		if err := s.add(p); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *SafetensorsSource) add(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSafetensors, err)
	}
	s.files = append(s.files, f)
	base := filepath.Base(path)
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSafetensors, err)
	}
	entries, err := parseSafetensorsHeader(f, st.Size())
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrSafetensors, base, err)
	}
	for name, e := range entries {
		if _, dup := s.tensors[name]; dup {
			return fmt.Errorf("%w: tensor %s appears in two files", ErrSafetensors, name)
		}
		e.file, e.name = f, base
		s.tensors[name] = e
	}
	return nil
}

type readerAt interface {
	ReadAt(p []byte, off int64) (int, error)
}

// parseSafetensorsHeader reads and checks the header of a file of the given
// size: every tensor's byte range must lie inside the data section and
// match its dtype and shape.
func parseSafetensorsHeader(r readerAt, size int64) (map[string]stEntry, error) {
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("header length: %v", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeader || int64(n) > size-8 {
		return nil, fmt.Errorf("header length %d in a %d-byte file", n, size)
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, fmt.Errorf("header: %v", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, fmt.Errorf("header: %v", err)
	}
	base := 8 + int64(n)
	out := map[string]stEntry{}
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		var t struct {
			Dtype   string  `json:"dtype"`
			Shape   []int   `json:"shape"`
			Offsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &t); err != nil {
			return nil, fmt.Errorf("tensor %s: %v", name, err)
		}
		es := map[string]int64{"F32": 4, "F16": 2, "BF16": 2}[t.Dtype]
		if len(t.Offsets) != 2 || t.Offsets[0] < 0 || t.Offsets[1] < t.Offsets[0] || base+t.Offsets[1] > size {
			return nil, fmt.Errorf("tensor %s: data_offsets %v outside the file", name, t.Offsets)
		}
		elems := int64(1)
		for _, d := range t.Shape {
			if d < 0 || (d > 0 && elems > math.MaxInt64/8/int64(d)) {
				return nil, fmt.Errorf("tensor %s: shape %v", name, t.Shape)
			}
			elems *= int64(d)
		}
		if es != 0 && elems*es != t.Offsets[1]-t.Offsets[0] {
			return nil, fmt.Errorf("tensor %s: %d bytes for %s %v", name, t.Offsets[1]-t.Offsets[0], t.Dtype, t.Shape)
		}
		out[name] = stEntry{dtype: t.Dtype, shape: t.Shape, offset: base + t.Offsets[0], size: t.Offsets[1] - t.Offsets[0]}
	}
	return out, nil
}

// Names lists the tensors, sorted.
func (s *SafetensorsSource) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.tensors))
	for n := range s.tensors {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Tensor reads the named tensor as float32.
func (s *SafetensorsSource) Tensor(name string) (llama.Tensor, error) {
	s.mu.Lock()
	e, ok := s.tensors[name]
	s.mu.Unlock()
	if !ok {
		return llama.Tensor{}, fmt.Errorf("%w: %s", llama.ErrMissingTensor, name)
	}
	buf := make([]byte, e.size)
	if _, err := e.file.ReadAt(buf, e.offset); err != nil {
		return llama.Tensor{}, fmt.Errorf("%w: %s: read %s: %v", ErrSafetensors, e.name, name, err)
	}
	var data []float32
	switch e.dtype {
	case "F32":
		data = make([]float32, len(buf)/4)
		for i := range data {
			data[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[i*4:]))
		}
	case "BF16":
		data = make([]float32, len(buf)/2)
		for i := range data {
			data[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(buf[i*2:])) << 16)
		}
	case "F16":
		data = make([]float32, len(buf)/2)
		for i := range data {
			data[i] = halfToFloat(binary.LittleEndian.Uint16(buf[i*2:]))
		}
	default:
		return llama.Tensor{}, fmt.Errorf("%w: %s: tensor %s has dtype %s (want F32, F16 or BF16)", ErrSafetensors, e.name, name, e.dtype)
	}
	return llama.Tensor{Shape: slices.Clone(e.shape), Data: data}, nil
}

// halfToFloat converts IEEE 754 binary16 bits to float32.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		return math.Float32frombits(sign) + float32(frac)*float32(math.Ldexp(1, -24))*sgn(sign)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
}

func sgn(sign uint32) float32 {
	if sign != 0 {
		return -1
	}
	return 1
}

// Close closes the files.
func (s *SafetensorsSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, f := range s.files {
		if err := f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			errs = append(errs, err)
		}
	}
	s.files = nil
	return errors.Join(errs...)
}
