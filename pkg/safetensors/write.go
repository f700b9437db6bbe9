package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// Write encodes tensors, in the given order, as a safetensors file on w.
// metadata may be nil. Each tensor needs a unique non-empty name, a known
// dtype and len(Data) == NumElements × dtype size. The header is padded
// with spaces to a multiple of 8 bytes so that Open's views are aligned.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	hdr, err := encodeHeader(tensors, metadata)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hdr)))
	bw.Write(n[:])
	bw.Write(hdr)
	for _, t := range tensors {
		bw.Write(t.Data)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	return nil
}

func encodeHeader(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	seen := map[string]bool{}
	if len(metadata) > 0 {
		// First, as the Python and Rust writers put it; map keys marshal
		// sorted, so the header is deterministic.
		m, _ := json.Marshal(metadata)
		b.WriteString(`"` + metadataKey + `":`)
		b.Write(m)
	}
	var off int64
	for i, t := range tensors {
		switch {
		case t.Name == "" || t.Name == metadataKey:
			return nil, fmt.Errorf("%w: tensor %d: name %q", ErrInvalid, i, t.Name)
		case seen[t.Name]:
			return nil, fmt.Errorf("%w: tensor %q given twice", ErrInvalid, t.Name)
		case t.DType.Size() == 0:
			return nil, fmt.Errorf("%w: tensor %q: unknown dtype %q", ErrInvalid, t.Name, t.DType)
		case slices.ContainsFunc(t.Shape, func(d int) bool { return d < 0 }):
			return nil, fmt.Errorf("%w: tensor %q: shape %v", ErrInvalid, t.Name, t.Shape)
		case len(t.Data) != t.NumElements()*t.DType.Size():
			return nil, fmt.Errorf("%w: tensor %q: %d bytes for %s%v, want %d",
				ErrInvalid, t.Name, len(t.Data), t.DType, t.Shape, t.NumElements()*t.DType.Size())
		}
		seen[t.Name] = true
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(t.Name)
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		ent, _ := json.Marshal(struct {
			DType   DType   `json:"dtype"`
			Shape   []int   `json:"shape"`
			Offsets []int64 `json:"data_offsets"`
		}{t.DType, shape, []int64{off, off + int64(len(t.Data))}})
		b.Write(name)
		b.WriteByte(':')
		b.Write(ent)
		off += int64(len(t.Data))
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return b.Bytes(), nil
}
