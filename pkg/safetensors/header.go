package safetensors

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
)

// MaxHeaderSize bounds the JSON header (the reference implementation's
// limit), so a corrupt length cannot make Open allocate or map gigabytes of
// JSON.
const MaxHeaderSize = 100 << 20

// metadataKey is the reserved header entry holding free-form string pairs.
const metadataKey = "__metadata__"

// entry is one tensor as the header describes it; begin and end are
// offsets into the data section (after the header).
type entry struct {
	name       string
	dtype      DType
	shape      []int
	begin, end int64
}

// rawEntry mirrors a tensor's JSON object. Pointers tell a missing field
// from a zero one.
type rawEntry struct {
	DType   *string  `json:"dtype"`
	Shape   *[]int64 `json:"shape"`
	Offsets *[]int64 `json:"data_offsets"`
}

// parseHeader decodes and validates a header for a data section of dataLen
// bytes. It returns the tensors in data order and the metadata. The checks
// follow the reference implementation: every byte of the data section
// belongs to exactly one tensor, in order, with no gap, overlap or tail.
func parseHeader(hdr []byte, dataLen int64) ([]entry, map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(hdr))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("%w: header is not a JSON object", ErrHeader)
	}
	var (
		entries []entry
		meta    map[string]string
		seen    = map[string]bool{}
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrHeader, err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, nil, fmt.Errorf("%w: key %v is not a string", ErrHeader, tok)
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("%w: tensor %q appears twice", ErrHeader, name)
		}
		seen[name] = true
		if name == metadataKey {
			if err := dec.Decode(&meta); err != nil {
				return nil, nil, fmt.Errorf("%w: %s must map strings to strings: %v", ErrHeader, metadataKey, err)
			}
			continue
		}
		var raw rawEntry
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, fmt.Errorf("%w: tensor %q: %v", ErrHeader, name, err)
		}
		e, err := checkEntry(name, raw)
		if err != nil {
			return nil, nil, err
		}
		entries = append(entries, e)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, nil, fmt.Errorf("%w: %v", ErrHeader, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, fmt.Errorf("%w: data after the header object", ErrHeader)
	}
	if err := checkLayout(entries, dataLen); err != nil {
		return nil, nil, err
	}
	return entries, meta, nil
}

// checkEntry validates one tensor on its own: known dtype, non-negative
// shape, and a byte span equal to the element count times the dtype size.
func checkEntry(name string, raw rawEntry) (entry, error) {
	bad := func(format string, args ...any) (entry, error) {
		return entry{}, fmt.Errorf("%w: tensor %q: %s", ErrHeader, name, fmt.Sprintf(format, args...))
	}
	if raw.DType == nil || raw.Shape == nil || raw.Offsets == nil {
		return bad("needs dtype, shape and data_offsets")
	}
	dt := DType(*raw.DType)
	size := int64(dt.Size())
	if size == 0 {
		return bad("unknown dtype %q", *raw.DType)
	}
	off := *raw.Offsets
	if len(off) != 2 || off[0] < 0 || off[1] < off[0] {
		return bad("data_offsets %v is not [begin, end] with 0 <= begin <= end", off)
	}
	shape := make([]int, len(*raw.Shape))
	elems := int64(1)
	for i, d := range *raw.Shape {
		if d < 0 || d > math.MaxInt {
			return bad("shape %v has a negative or oversized dimension", *raw.Shape)
		}
		shape[i] = int(d)
		if elems != 0 && d > math.MaxInt64/size/elems {
			return bad("shape %v overflows", *raw.Shape)
		}
		elems *= d
	}
	if span := off[1] - off[0]; span != elems*size {
		return bad("%d bytes for %s%v, want %d", span, dt, *raw.Shape, elems*size)
	}
	return entry{name: name, dtype: dt, shape: shape, begin: off[0], end: off[1]}, nil
}

// checkLayout sorts entries by offset and requires them to tile the data
// section exactly.
func checkLayout(entries []entry, dataLen int64) error {
	slices.SortStableFunc(entries, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end))
	})
	var pos int64
	for i, e := range entries {
		switch {
		case e.end > dataLen:
			return fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] beyond the %d-byte data section",
				ErrHeader, e.name, e.begin, e.end, dataLen)
		case e.begin < pos:
			return fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] overlap tensor %q",
				ErrHeader, e.name, e.begin, e.end, entries[i-1].name)
		case e.begin > pos:
			return fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] leave a gap after offset %d",
				ErrHeader, e.name, e.begin, e.end, pos)
		}
		pos = e.end
	}
	if pos != dataLen {
		return fmt.Errorf("%w: tensors cover %d of the %d data bytes", ErrHeader, pos, dataLen)
	}
	return nil
}
