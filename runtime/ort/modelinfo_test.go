package ort

import (
	"os"
	"path/filepath"
	"testing"
)

func FuzzReadModelInfo(f *testing.F) {
	f.Add(addModel())
	f.Add(slowModel(2, 4))
	if paths, _ := filepath.Glob(filepath.Join(conformanceDir, "test_a*", "model.onnx")); len(paths) > 0 {
		for _, p := range paths[:min(len(paths), 8)] {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := ReadModelInfo(b)
		if err != nil {
			return
		}
		for _, v := range append(info.Inputs, info.Outputs...) {
			_ = v.String()
			if v.DimNames != nil && len(v.DimNames) != len(v.Shape) {
				t.Fatalf("%s: %d names for rank %d", v.Name, len(v.DimNames), len(v.Shape))
			}
		}
	})
}

func FuzzParseTensorProto(f *testing.F) {
	if paths, _ := filepath.Glob(filepath.Join(conformanceDir, "test_a*", "test_data_set_0", "*.pb")); len(paths) > 0 {
		for _, p := range paths[:min(len(paths), 8)] {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte{0x08, 0x02, 0x10, 0x01, 0x22, 0x08, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40})
	f.Fuzz(func(t *testing.T, b []byte) {
		dt, dims, raw, err := parseTensorProto(b)
		if err != nil {
			return
		}
		n, _ := elementCount(dims)
		if len(raw) != int(n)*dt.Size() {
			t.Fatalf("%s%v: %d bytes", dt, dims, len(raw))
		}
	})
}

func TestReadModelInfo(t *testing.T) {
	info, err := ReadModelInfo(addModel())
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Inputs) != 1 || info.Inputs[0].String() != "x: float32[batch,4]" {
		t.Errorf("inputs %v (the initializer b must not be listed)", info.Inputs)
	}
	if info.Producer != "edgeinfer-test" || info.Metadata["purpose"] != "test" || len(info.Opsets) != 1 || info.Opsets[0].Version != 17 {
		t.Errorf("header %+v", info)
	}
}
