package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeFile writes tensors to dir/name and returns the path.
func writeFile(t *testing.T, dir, name string, tensors []Tensor, meta map[string]string) string {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, tensors, meta); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRoundTrip(t *testing.T) {
	w := []float32{1, -2, 0.5, 3.140625, 65504, -1e-3}
	f16, err := FromFloat32sAs("h", F16, []int{2, 3}, w)
	if err != nil {
		t.Fatal(err)
	}
	bf, err := FromFloat32sAs("b", BF16, []int{6}, w)
	if err != nil {
		t.Fatal(err)
	}
	in := []Tensor{
		FromFloat32s("model.norm.weight", []int{2, 3}, w),
		f16, bf,
		{Name: "ids", DType: I64, Shape: []int{2}, Data: binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 7), 9)},
		{Name: "empty", DType: F32, Shape: []int{0, 5}, Data: nil},
		{Name: "scalar", DType: U8, Shape: nil, Data: []byte{42}},
	}
	p := writeFile(t, t.TempDir(), "m.safetensors", in, map[string]string{"format": "pt"})
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.Names(); !slices.Equal(got, []string{"model.norm.weight", "h", "b", "ids", "empty", "scalar"}) {
		t.Errorf("Names = %v", got)
	}
	if got := f.Metadata()["format"]; got != "pt" {
		t.Errorf("metadata format = %q", got)
	}
	tests := []struct {
		name  string
		want  []float32
		shape []int
		tol   float64
	}{
		{"model.norm.weight", w, []int{2, 3}, 0},
		{"h", w, []int{2, 3}, 1e-3}, // half: 11-bit mantissa
		{"b", w, []int{6}, 1e-2},    // bfloat16: 8-bit mantissa
		{"empty", []float32{}, []int{0, 5}, 0},
	}
	for _, tc := range tests {
		tt, err := f.Tensor(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tt.Shape, tc.shape) {
			t.Errorf("%s shape %v, want %v", tc.name, tt.Shape, tc.shape)
		}
		got, err := f.Float32s(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %d values, want %d", tc.name, len(got), len(tc.want))
		}
		for i := range got {
			if d := math.Abs(float64(got[i] - tc.want[i])); d > tc.tol*math.Max(1, math.Abs(float64(tc.want[i]))) {
				t.Errorf("%s[%d] = %v, want %v", tc.name, i, got[i], tc.want[i])
			}
		}
	}
	view, err := mustTensor(t, f, "model.norm.weight").Float32View()
	if err != nil || !slices.Equal(view, w) {
		t.Errorf("Float32View = %v, %v", view, err)
	}
	ids := mustTensor(t, f, "ids")
	if binary.LittleEndian.Uint64(ids.Data[8:]) != 9 {
		t.Errorf("ids bytes %v", ids.Data)
	}
	if _, err := ids.Float32s(); !errors.Is(err, ErrDType) {
		t.Errorf("Float32s of I64: %v, want ErrDType", err)
	}
	if _, err := mustTensor(t, f, "h").Float32View(); !errors.Is(err, ErrDType) {
		t.Errorf("Float32View of F16: %v, want ErrDType", err)
	}
	if s := mustTensor(t, f, "scalar"); s.NumElements() != 1 || s.Data[0] != 42 {
		t.Errorf("scalar = %+v", s)
	}
	if _, err := f.Tensor("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing tensor: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.Tensor("h"); !errors.Is(err, ErrClosed) {
		t.Errorf("Tensor after Close: %v", err)
	}
}

func mustTensor(t *testing.T, s Source, name string) Tensor {
	t.Helper()
	tt, err := s.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	return tt
}

// TestPythonFile reads a file written by examples/tinylm/train.py's writer.
func TestPythonFile(t *testing.T) {
	f, err := Open("testdata/python.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	emb, err := f.Float32s("model.embed_tokens.weight")
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range emb {
		if v != float32(i)/4 {
			t.Fatalf("embed[%d] = %v, want %v", i, v, float32(i)/4)
		}
	}
	norm, _ := f.Float32s("model.norm.weight")
	if !slices.Equal(norm, []float32{1, -2.5, 3.25, 1e-3}) {
		t.Errorf("norm = %v", norm)
	}
	if s := mustTensor(t, f, "scalar"); len(s.Shape) != 0 || s.NumElements() != 1 {
		t.Errorf("scalar shape %v", s.Shape)
	}
	if f.Metadata()["source"] != "train.py" {
		t.Errorf("metadata %v", f.Metadata())
	}
	// The Go writer produces the same bytes for the same tensors.
	var b bytes.Buffer
	in := []Tensor{mustTensor(t, f, "model.embed_tokens.weight"), mustTensor(t, f, "model.norm.weight"), mustTensor(t, f, "scalar")}
	if err := Write(&b, in, f.Metadata()); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile("testdata/python.safetensors")
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("Go writer differs from train.py's:\n%q\n%q", b.Bytes()[:80], want[:80])
	}
}

// rawFile builds a file from a literal header and n data bytes.
func rawFile(header string, n int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, n)...)
}

func TestBadHeaders(t *testing.T) {
	tests := []struct {
		name string
		file []byte
		want string // substring of the error
	}{
		{"short", []byte{1, 2, 3}, "shorter than"},
		{"huge length", binary.LittleEndian.AppendUint64(nil, 1<<40), "header length"},
		{"length past end", rawFile(`{}`, 0)[:9], "header length"},
		{"not json", rawFile(`{"a":`, 0), "invalid header"},
		{"not object", rawFile(`[1]`, 0), "not a JSON object"},
		{"trailing", rawFile(`{}{}`, 0), "after the header"},
		{"unknown dtype", rawFile(`{"w":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}}`, 1), `"w": unknown dtype`},
		{"missing field", rawFile(`{"w":{"dtype":"F32","shape":[1]}}`, 4), `"w": needs`},
		{"negative dim", rawFile(`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), `"w": shape`},
		{"span mismatch", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), `"w": 4 bytes for F32[2], want 8`},
		{"offsets reversed", rawFile(`{"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, 4), `"w": data_offsets`},
		{"out of range", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4), `"w": data_offsets [0, 8] beyond`},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), `"b": data_offsets [4, 8] overlap tensor "a"`},
		{"gap", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), `"a": data_offsets [4, 8] leave a gap`},
		{"tail", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8), "cover 4 of the 8"},
		{"duplicate", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), `"a" appears twice`},
		{"bad metadata", rawFile(`{"__metadata__":{"n":1}}`, 0), "__metadata__"},
		{"overflow", rawFile(`{"w":{"dtype":"F64","shape":[2147483647,2147483647,2147483647],"data_offsets":[0,8]}}`, 8), "overflows"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromBytes(tc.file)
			if !errors.Is(err, ErrHeader) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrHeader containing %q", err, tc.want)
			}
		})
	}
}

func TestOpenNamesPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.safetensors")
	os.WriteFile(p, rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), 0o644)
	_, err := Open(p)
	if !errors.Is(err, ErrHeader) || !strings.Contains(err.Error(), p) {
		t.Errorf("err = %v, want ErrHeader naming %s", err, p)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestWriteRejects(t *testing.T) {
	tests := []struct {
		name string
		in   []Tensor
	}{
		{"empty name", []Tensor{{DType: U8, Shape: []int{1}, Data: []byte{1}}}},
		{"reserved name", []Tensor{{Name: metadataKey, DType: U8, Shape: []int{1}, Data: []byte{1}}}},
		{"duplicate", []Tensor{{Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}, {Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}}},
		{"dtype", []Tensor{{Name: "a", DType: "X", Shape: []int{1}, Data: []byte{1}}}},
		{"size", []Tensor{{Name: "a", DType: F32, Shape: []int{2}, Data: []byte{1, 2, 3, 4}}}},
		{"negative", []Tensor{{Name: "a", DType: U8, Shape: []int{-1}, Data: nil}}},
	}
	for _, tc := range tests {
		if err := Write(&bytes.Buffer{}, tc.in, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
		}
	}
}

func TestAlignment(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, []Tensor{FromFloat32s("w", []int{3}, []float32{1, 2, 3})}, nil); err != nil {
		t.Fatal(err)
	}
	if hl := binary.LittleEndian.Uint64(b.Bytes()); hl%8 != 0 {
		t.Errorf("header length %d not a multiple of 8", hl)
	}
	// A view one byte off the natural alignment must refuse, and Float32s
	// must still decode.
	buf := make([]byte, b.Len()+1)
	copy(buf[1:], b.Bytes())
	f, err := FromBytes(buf[1:])
	if err != nil {
		t.Fatal(err)
	}
	w := mustTensor(t, f, "w")
	if _, err := w.Float32View(); !errors.Is(err, ErrAlignment) {
		t.Errorf("misaligned view: %v", err)
	}
	if v, err := w.Float32s(); err != nil || !slices.Equal(v, []float32{1, 2, 3}) {
		t.Errorf("Float32s = %v, %v", v, err)
	}
}
