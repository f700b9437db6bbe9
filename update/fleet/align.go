package fleet

import (
	"crypto/sha256"
	"hash"
	"io"
	"os"
	"path"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// Chunks that straddle two tensors make a release that rewrote one tensor
// carry its neighbours' edges too: with the store's 1 MiB average chunks,
// an int4 layer of synthetic-110m (a few MB) travels with parts of the
// tensors beside it (TestDeltaFigures, in update, measures bytes on the
// wire against the bytes that changed). So a publisher cuts ONNX external
// data files at tensor starts first and runs the content-defined chunker
// within each tensor: a changed tensor is new chunks exactly, an unchanged
// one the same chunks as before. The device stores whatever chunk list the signed
// release declares, so this costs it nothing; a version imported locally
// (store.Import, CDC over the whole file) shares fewer chunks with it.

// tensorStarts returns, per external data file of the bundle, the sorted
// offsets at which tensors start, read from the bundle's ONNX models.
func tensorStarts(dir string, files []string) map[string][]int64 {
	out := map[string][]int64{}
	for _, f := range files {
		if path.Ext(f) != ".onnx" {
			continue
		}
		b, err := os.ReadFile(dir + "/" + f)
		if err != nil {
			continue
		}
		var m onnx.ModelProto
		if proto.Unmarshal(b, &m) != nil || m.GetGraph() == nil {
			continue // not a model we can read: plain CDC
		}
		for _, t := range m.GetGraph().GetInitializer() {
			if t.GetDataLocation() != onnx.TensorProto_EXTERNAL {
				continue
			}
			var loc string
			var off int64 = -1
			for _, kv := range t.GetExternalData() {
				switch kv.GetKey() {
				case "location":
					loc = kv.GetValue()
				case "offset":
					off, _ = strconv.ParseInt(kv.GetValue(), 10, 64)
				}
			}
			if loc != "" && off >= 0 {
				p := path.Join(path.Dir(f), loc)
				out[p] = append(out[p], off)
			}
		}
	}
	for p, offs := range out {
		slices.Sort(offs)
		out[p] = slices.Compact(offs)
	}
	return out
}

// splitAt cuts the file at the given offsets, then each piece with the
// store's chunker, and returns the file record.
func splitAt(fh *os.File, size int64, cuts []int64, put func(store.Chunk, []byte) error) (store.File, error) {
	var f store.File
	// Tensors under minPiece (norm weights, biases) share a piece with
	// the next: a chunk and a request per 3 KB tensor would cost more in
	// metadata and round trips than their edges cost in bytes.
	const minPiece = 64 << 10
	bounds := []int64{0}
	for _, c := range cuts {
		if c-bounds[len(bounds)-1] >= minPiece && c < size {
			bounds = append(bounds, c)
		}
	}
	bounds = append(bounds, size)
	h := newHasher()
	for i := 0; i+1 < len(bounds); i++ {
		sec := io.NewSectionReader(fh, bounds[i], bounds[i+1]-bounds[i])
		part, err := store.Split(io.TeeReader(sec, h), put)
		if err != nil {
			return store.File{}, err
		}
		f.Chunks = append(f.Chunks, part.Chunks...)
		f.Size += part.Size
	}
	copy(f.SHA256[:], h.Sum(nil))
	return f, nil
}

func newHasher() hash.Hash { return sha256.New() }
