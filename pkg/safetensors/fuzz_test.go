package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func seedFiles(f *testing.F) {
	var b bytes.Buffer
	Write(&b, []Tensor{
		FromFloat32s("w", []int{2, 2}, []float32{1, 2, 3, 4}),
		{Name: "i", DType: I8, Shape: []int{3}, Data: []byte{1, 2, 3}},
	}, map[string]string{"format": "pt"})
	f.Add(b.Bytes())
	py, _ := os.ReadFile("testdata/python.safetensors")
	f.Add(py)
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8))
	f.Add(rawFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, 0))
	f.Add([]byte{})
}

// FuzzParseHeader checks that any input either fails with an error or
// yields tensors whose views lie inside the data and match their shapes,
// and that such a file survives a rewrite unchanged in content.
func FuzzParseHeader(f *testing.F) {
	seedFiles(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := FromBytes(b)
		if err != nil {
			return
		}
		var all []Tensor
		for _, n := range file.Names() {
			tt, err := file.Tensor(n)
			if err != nil {
				t.Fatal(err)
			}
			if len(tt.Data) != tt.NumElements()*tt.DType.Size() {
				t.Fatalf("%s: %d bytes for %v %v", n, len(tt.Data), tt.DType, tt.Shape)
			}
			if _, err := tt.Float32s(); err != nil && (tt.DType == F32 || tt.DType == F16 || tt.DType == BF16) {
				t.Fatal(err)
			}
			all = append(all, tt)
		}
		var out bytes.Buffer
		if err := Write(&out, all, file.Metadata()); err != nil {
			t.Fatalf("rewrite: %v", err)
		}
		again, err := FromBytes(out.Bytes())
		if err != nil {
			t.Fatalf("reopen rewrite: %v", err)
		}
		for _, tt := range all {
			got, err := again.Tensor(tt.Name)
			if err != nil || !bytes.Equal(got.Data, tt.Data) {
				t.Fatalf("%s changed on rewrite: %v", tt.Name, err)
			}
		}
	})
}

// FuzzOpen exercises the mapped path: write the bytes to a file and Open it.
func FuzzOpen(f *testing.F) {
	seedFiles(f)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "f.safetensors")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		file, err := Open(p)
		if err != nil {
			return
		}
		for _, n := range file.Names() {
			tt, _ := file.Tensor(n)
			_ = tt.Data[len(tt.Data)/2:] // in range of the mapping
			_, _ = tt.Float32s()
		}
		if err := file.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
