package ort

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// conformanceDir holds Debian libonnx-testdata's operator tests: one
// directory per test with model.onnx and test_data_set_0/{input,output}_N.pb.
const conformanceDir = "/usr/share/libonnx-testdata/data/node"

// TestConformance runs the ONNX backend operator tests through this package
// on the CPU provider and compares every output with the reference data.
// Tests whose data this package cannot express (string, sequence, optional
// values) are skipped with the reason; everything else that does not match
// is a failure with its category and reason (shown under -v). Under -short
// (the qemu run) every 8th test runs.
func TestConformance(t *testing.T) {
	needLib(t)
	dirs, err := filepath.Glob(filepath.Join(conformanceDir, "*", "model.onnx"))
	if err != nil || len(dirs) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no conformance data in %s (apt-get install libonnx-testdata)", conformanceDir)
		}
		t.Skipf("no conformance data in %s (apt-get install libonnx-testdata)", conformanceDir)
	}
	sort.Strings(dirs)
	if testing.Short() {
		var sub []string
		for i := 0; i < len(dirs); i += 8 {
			sub = append(sub, dirs[i])
		}
		dirs = sub
	}
	var passed, failed, skipped int
	categories := map[string]int{}
	for _, model := range dirs {
		dir := filepath.Dir(model)
		name := filepath.Base(dir)
		status, category, reason := runConformanceCase(dir)
		switch status {
		case "pass":
			passed++
		case "skip":
			skipped++
			categories["skipped: "+category]++
			if testing.Verbose() {
				t.Logf("SKIP %s: %s: %s", name, category, reason)
			}
		default:
			failed++
			categories["failed: "+category]++
			t.Logf("FAIL %s: %s: %s", name, category, reason)
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range categories {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		t.Logf("  %-50s %d", k, categories[k])
	}
	line := fmt.Sprintf("conformance: %d passed, %d failed, %d skipped", passed, failed, skipped)
	t.Log(line)
	fmt.Println(line)
	min := 300
	if testing.Short() {
		min = 300 / 8
	}
	if passed < min {
		t.Errorf("only %d conformance tests passed, want at least %d", passed, min)
	}
}

func runConformanceCase(dir string) (status, category, reason string) {
	data, err := os.ReadFile(filepath.Join(dir, "model.onnx"))
	if err != nil {
		return "fail", "unreadable", err.Error()
	}
	info, err := ReadModelInfo(data)
	if err != nil {
		return "fail", "unparsable model", err.Error()
	}
	for _, v := range slices.Concat(info.Inputs, info.Outputs) {
		if v.Kind != "tensor" {
			return "skip", "non-tensor value (" + v.Kind + ")", v.Name
		}
		if v.DType.Size() == 0 {
			return "skip", "unsupported dtype (" + v.DType.String() + ")", v.Name
		}
	}
	if len(info.Inputs) == 0 {
		return "skip", "model without inputs", "onnxruntime_go cannot run a graph with no inputs"
	}
	name := filepath.Base(dir)
	if strings.HasPrefix(name, "test_bernoulli") || strings.HasPrefix(name, "test_training_dropout") {
		return "skip", "random operator", "output depends on the RNG, which differs from the reference's"
	}
	ctx := context.Background()
	s, err := NewSession(ctx, data, Options{IntraOpThreads: 1, Providers: []ProviderConfig{{Name: CPU}}, NoProbe: true})
	if err != nil {
		msg := err.Error()
		switch {
		case strings.Contains(msg, "Could not find an implementation"), strings.Contains(msg, "is not a registered function/op"):
			// ONNX Runtime's words when the build has no kernel for an
			// operator (or for its type): it says so while creating the
			// session, never later in Run.
			return "fail", "operator or type not in CPU build", firstLine(msg)
		case strings.Contains(msg, "Exception during initialization"):
			return "fail", "operator attribute not supported by CPU kernel", firstLine(msg)
		case strings.Contains(msg, "opset"):
			return "fail", "opset not supported", firstLine(msg)
		}
		return "fail", "load error", firstLine(msg)
	}
	defer s.Close()
	set := filepath.Join(dir, "test_data_set_0")
	inputs := map[string]*Tensor{}
	defer CloseAll(inputs)
	for i, v := range info.Inputs {
		b, err := os.ReadFile(filepath.Join(set, fmt.Sprintf("input_%d.pb", i)))
		if err != nil {
			return "skip", "optional input without data", v.Name
		}
		dt, dims, raw, err := parseTensorProto(b)
		if err != nil {
			return "skip", "unsupported test data", err.Error()
		}
		if dt == Uint16 && v.DType == BFloat16 {
			dt = BFloat16 // older ONNX test data stores bfloat16 as uint16
		}
		x, err := CopyBytes(dt, dims, raw)
		if err != nil {
			return "fail", "tensor", err.Error()
		}
		inputs[v.Name] = x
	}
	type expected struct {
		dt   DType
		dims []int64
		raw  []byte
	}
	want := make([]expected, len(info.Outputs))
	outputs := map[string]*Tensor{}
	defer CloseAll(outputs)
	for i, v := range info.Outputs {
		b, err := os.ReadFile(filepath.Join(set, fmt.Sprintf("output_%d.pb", i)))
		if err != nil {
			return "skip", "no reference output", v.Name
		}
		dt, dims, raw, err := parseTensorProto(b)
		if err != nil {
			return "skip", "unsupported test data", err.Error()
		}
		if dt == Uint16 && v.DType == BFloat16 {
			dt = BFloat16
		}
		want[i] = expected{dt, dims, raw}
		if dt == Float16 || dt == BFloat16 || len(dims) == 0 {
			// The Go binding cannot allocate these outputs itself.
			if outputs[v.Name], err = NewEmptyTensor(dt, dims); err != nil {
				return "fail", "tensor", err.Error()
			}
		}
	}
	if err := s.RunInto(ctx, inputs, outputs); err != nil {
		msg := err.Error()
		if errors.Is(err, ErrShapeMismatch) {
			return "fail", "test data contradicts the model's declared shape", firstLine(msg)
		}
		return "fail", "run error", firstLine(msg)
	}
	for i, v := range info.Outputs {
		got := outputs[v.Name]
		w := want[i]
		if got.DType() != w.dt {
			return "fail", "dtype mismatch", fmt.Sprintf("%s: got %s, want %s", v.Name, got.DType(), w.dt)
		}
		if !slices.Equal(got.Shape(), w.dims) {
			return "fail", "shape mismatch", fmt.Sprintf("%s: got %v, want %v", v.Name, got.Shape(), w.dims)
		}
		if ok, diff := closeEnough(w.dt, got.Bytes(), w.raw); !ok {
			return "fail", "numeric mismatch", fmt.Sprintf("%s: %s", v.Name, diff)
		}
	}
	return "pass", "", ""
}

// closeEnough compares element by element: floats within
// |a-b| <= 1e-4 + 1e-3*|b| (NaN equals NaN), everything else exactly.
func closeEnough(dt DType, got, want []byte) (bool, string) {
	if len(got) != len(want) {
		return false, fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	var f func(b []byte, i int) float64
	switch dt {
	case Float32:
		f = func(b []byte, i int) float64 {
			return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
	case Float64:
		f = func(b []byte, i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])) }
	case Float16:
		f = func(b []byte, i int) float64 {
			return float64(Float16Bits(binary.LittleEndian.Uint16(b[2*i:])).Float32())
		}
	case BFloat16:
		f = func(b []byte, i int) float64 {
			return float64(BFloat16Bits(binary.LittleEndian.Uint16(b[2*i:])).Float32())
		}
	default:
		for i := range got {
			if got[i] != want[i] {
				return false, fmt.Sprintf("byte %d differs (exact %s comparison)", i, dt)
			}
		}
		return true, ""
	}
	rtol, atol := 1e-3, 1e-4
	if dt == Float16 || dt == BFloat16 {
		rtol, atol = 1e-2, 1e-2
	}
	n := len(got) / dt.Size()
	maxDiff, bad := 0.0, -1
	for i := range n {
		a, b := f(got, i), f(want, i)
		if math.IsNaN(a) && math.IsNaN(b) || a == b {
			continue
		}
		d := math.Abs(a - b)
		if math.IsNaN(d) || d > atol+rtol*math.Abs(b) {
			if bad < 0 || d > maxDiff || math.IsNaN(d) {
				maxDiff, bad = d, i
			}
		}
	}
	if bad >= 0 {
		return false, fmt.Sprintf("max diff %g at element %d (got %g, want %g)", maxDiff, bad, f(got, bad), f(want, bad))
	}
	return true, ""
}
