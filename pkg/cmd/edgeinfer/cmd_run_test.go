package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"strings"
	"testing"
)

const testAdd = "/usr/share/libonnx-testdata/data/node/test_add"

func TestInspectAndRun(t *testing.T) {
	if _, err := os.Stat(testAdd); err != nil {
		t.Skip("libonnx-testdata not installed")
	}
	var out bytes.Buffer
	if err := runInspect(context.Background(), &out, []string{testAdd + "/model.onnx"}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"x", "float32[3,4,5]", "ai.onnx", "parameters:"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("inspect output lacks %q:\n%s", w, out.String())
		}
	}
	out.Reset()
	err := runRun(context.Background(), &out, []string{testAdd + "/model.onnx", "--runs", "5", "--input", "x=" + testAdd + "/test_data_set_0/input_0.pb", "--threads", "1"})
	if err != nil {
		if os.Getenv("CI") != "true" && strings.Contains(err.Error(), "library not found") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	for _, w := range []string{"provider: CPU", "load:", "p50", "p99", "output sum: float32[3 4 5]"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("run output lacks %q:\n%s", w, out.String())
		}
	}
}

func TestRunUsage(t *testing.T) {
	if err := runRun(context.Background(), &bytes.Buffer{}, nil); err == nil {
		t.Fatal("no error without a model")
	}
	err := runRun(context.Background(), &bytes.Buffer{}, []string{"m.onnx", "--provider", "tpu"})
	if err == nil || !strings.Contains(err.Error(), "unknown execution provider") {
		t.Fatalf("bad provider: %v", err)
	}
}

func npy(descr, shape string, data []byte) []byte {
	h := "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }"
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	b := []byte("\x93NUMPY\x01\x00")
	b = binary.LittleEndian.AppendUint16(b, uint16(len(h)))
	return append(append(b, h...), data...)
}

func TestParseNPY(t *testing.T) {
	data := binary.LittleEndian.AppendUint32(nil, math.Float32bits(1.5))
	data = binary.LittleEndian.AppendUint32(data, math.Float32bits(2))
	dt, shape, raw, err := parseNPY(npy("<f4", "1, 2", data))
	if err != nil || dt.String() != "float32" || len(shape) != 2 || shape[1] != 2 || len(raw) != 8 {
		t.Fatalf("parseNPY = %v %v %d %v", dt, shape, len(raw), err)
	}
	for _, bad := range [][]byte{nil, []byte("\x93NUMPY\x01\x00\xff\xff"), npy("<c8", "1,", nil)} {
		if _, _, _, err := parseNPY(bad); err == nil {
			t.Errorf("parseNPY(%q) accepted", bad)
		}
	}
}

func FuzzParseNPY(f *testing.F) {
	f.Add(npy("<f4", "2,", make([]byte, 8)))
	f.Add(npy("<i8", "", make([]byte, 8)))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _, _ = parseNPY(b)
	})
}
