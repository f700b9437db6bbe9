package ort

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRunAdd(t *testing.T) {
	needLib(t)
	ctx := context.Background()
	s, err := NewSession(ctx, addModel(), Options{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Provider() != CPU {
		t.Errorf("provider %s, want CPU on this build", s.Provider())
	}
	t.Logf("version %s, attempts %v, load %v", Version(), s.ProviderAttempts(), s.LoadTime())
	runAdd(t, s)
}

// runAdd runs addModel's session on a [2, 4] input and checks y = x + b.
func runAdd(t *testing.T, s *Session) {
	t.Helper()
	x, err := CopyTensor([]int64{2, 4}, []float32{1, 2, 3, 4, 5, 6, 7, 8})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	out, err := s.Run(context.Background(), map[string]*Tensor{"x": x})
	if err != nil {
		t.Fatal(err)
	}
	defer CloseAll(out)
	y, err := Data[float32](out["y"])
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{11, 22, 33, 44, 15, 26, 37, 48}
	if !slices.Equal(y, want) {
		t.Errorf("y = %v, want %v", y, want)
	}
	if got := out["y"].Shape(); !slices.Equal(got, []int64{2, 4}) {
		t.Errorf("shape %v", got)
	}
}

// TestProfilePrefix: a session with ProfilePrefix writes ONNX Runtime's
// per-node trace when it closes, naming the model's node.
func TestProfilePrefix(t *testing.T) {
	needLib(t)
	ctx := context.Background()
	prefix := filepath.Join(t.TempDir(), "prof")
	s, err := NewSession(ctx, addModel(), Options{IntraOpThreads: 1, ProfilePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	runAdd(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(prefix + "*.json")
	if len(files) != 1 {
		t.Fatalf("profile files %v, want one", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"op_name" : "Add"`) && !strings.Contains(string(data), `"op_name":"Add"`) {
		t.Errorf("profile names no Add node: %.300s", data)
	}
}
