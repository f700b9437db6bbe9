package ort

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func newAddSession(t *testing.T) *Session {
	t.Helper()
	needLib(t)
	s, err := NewSession(context.Background(), addModel(), Options{IntraOpThreads: 1, NoSpinning: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestBadModels(t *testing.T) {
	needLib(t)
	good := addModel()
	unknownOp := tModel{
		opsets: map[string]int64{"": 17, "com.example": 1},
		nodes:  []tNode{{op: "NoSuchOp", domain: "com.example", in: []string{"x"}, out: []string{"y"}}},
		inputs: []tValue{{name: "x", dtype: Float32, dims: []any{4}}},
		outs:   []tValue{{name: "y", dtype: Float32, dims: []any{4}}},
	}.encode()
	tests := []struct {
		name  string
		model []byte
		want  []string
	}{
		{"empty", nil, []string{"empty model"}},
		{"garbage", []byte("this is not an onnx model at all"), []string{"invalid model"}},
		{"truncated", good[:len(good)/2], []string{"invalid model"}},
		{"unknown operator", unknownOp, []string{"invalid model", "NoSuchOp"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSession(context.Background(), tc.model, Options{})
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalidModel) {
				t.Errorf("error %v does not wrap ErrInvalidModel", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestBadInputs(t *testing.T) {
	s := newAddSession(t)
	mk := func(t *testing.T, shape []int64) *Tensor {
		x, err := NewEmptyTensor(Float32, shape)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close() })
		return x
	}
	i64, err := NewEmptyTensor(Int64, []int64{1, 4})
	if err != nil {
		t.Fatal(err)
	}
	defer i64.Close()
	closed := mk(t, []int64{1, 4})
	closed.Close()
	tests := []struct {
		name   string
		inputs map[string]*Tensor
		is     error
		want   string
	}{
		{"wrong name", map[string]*Tensor{"x": mk(t, []int64{1, 4}), "z": mk(t, []int64{1, 4})}, ErrUnknownInput, `input "z"`},
		{"missing", map[string]*Tensor{}, ErrMissingInput, `"x" (x: float32[batch,4])`},
		{"dtype", map[string]*Tensor{"x": i64}, ErrTypeMismatch, `input "x": expected x: float32[batch,4], given int64[1 4]`},
		{"shape", map[string]*Tensor{"x": mk(t, []int64{1, 5})}, ErrShapeMismatch, `input "x": expected x: float32[batch,4], given float32[1 5]`},
		{"rank", map[string]*Tensor{"x": mk(t, []int64{4})}, ErrShapeMismatch, `given float32[4]`},
		{"closed tensor", map[string]*Tensor{"x": closed}, ErrClosed, `input "x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Run(context.Background(), tc.inputs)
			if !errors.Is(err, tc.is) {
				t.Fatalf("error %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
		})
	}
	// Symbolic dimensions accept any size.
	out, err := s.Run(context.Background(), map[string]*Tensor{"x": mk(t, []int64{7, 4})})
	if err != nil {
		t.Fatal(err)
	}
	CloseAll(out)
}

func TestRunAfterClose(t *testing.T) {
	s := newAddSession(t)
	x, _ := NewEmptyTensor(Float32, []int64{1, 4})
	defer x.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Run(context.Background(), map[string]*Tensor{"x": x}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
}

// slowSession runs a chain of many small MatMuls: long enough (seconds, even
// with AVX-512: at 128 a side the chain took under 100 ms) to
// be interrupted, with nodes short enough, even under qemu, that the
// terminate flag checked between nodes is seen quickly.
func slowSession(t *testing.T) (*Session, *Tensor) {
	t.Helper()
	needLib(t)
	s, err := NewSession(context.Background(), slowModel(3000, 256), Options{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	x, err := NewEmptyTensor(Float32, []int64{256, 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); x.Close() })
	return s, x
}

func TestCancelRun(t *testing.T) {
	s, x := slowSession(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Run(ctx, map[string]*Tensor{"x": x})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrRun) {
		t.Fatalf("error %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("cancelled run took %v", d)
	}
	// The session stays usable: a fresh context runs (and is cancelled) again,
	// proving the terminate flag was reset.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := s.Run(ctx2, map[string]*Tensor{"x": x}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second run: %v", err)
	}
}

func TestCloseDuringRun(t *testing.T) {
	s, x := slowSession(t)
	begun := make(chan struct{})
	s.onBegin = func() { close(begun) } // one run only
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(context.Background(), map[string]*Tensor{"x": x})
		done <- err
	}()
	<-begun // the native run is in flight
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.activeRuns() != 0 {
		t.Fatal("Close returned with a run still in flight")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v: the run was not terminated", d)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("run error %v, want ErrClosed", err)
	}
}

func TestConcurrentRuns(t *testing.T) {
	s := newAddSession(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Go(func() {
			x, err := CopyTensor([]int64{1, 4}, []float32{float32(g), 0, 0, 0})
			if err != nil {
				errs <- err
				return
			}
			defer x.Close()
			for range 50 {
				out, err := s.Run(context.Background(), map[string]*Tensor{"x": x})
				if err != nil {
					errs <- err
					return
				}
				y, _ := Data[float32](out["y"])
				if y[0] != float32(g)+10 {
					errs <- errors.New("wrong result under concurrency")
				}
				CloseAll(out)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestLibraryErrors(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "libonnxruntime.so.1")
	os.WriteFile(notELF, []byte("hello"), 0o644)
	arm64 := filepath.Join(filepath.Dir(filepath.Dir(CachedLibraryPath())), "linux-arm64", "libonnxruntime.so.1")
	amd64 := filepath.Join(filepath.Dir(filepath.Dir(CachedLibraryPath())), "linux-amd64", "libonnxruntime.so.1")
	foreign := arm64
	wantArch := "is an aarch64 (arm64) library but this process is x86-64"
	if runtimeGOARCH() == "arm64" {
		foreign, wantArch = amd64, "is an x86-64 (amd64) library but this process is aarch64 (arm64)"
	}
	tests := []struct {
		name, path string
		is         error
		want       string
	}{
		{"directory", dir, ErrLibraryNotFound, "is a directory"},
		{"missing", filepath.Join(dir, "nope.so"), ErrLibraryNotFound, "no such file"},
		{"not elf", notELF, ErrLibraryLoad, "not an ELF"},
		{"wrong arch", foreign, ErrLibraryArch, wantArch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "wrong arch" {
				if _, err := os.Stat(tc.path); err != nil {
					t.Skipf("no foreign library at %s (make setup installs it)", tc.path)
				}
			}
			_, err := FindLibrary(tc.path)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("FindLibrary(%s) = %v, want %v containing %q", tc.path, err, tc.is, tc.want)
			}
			t.Setenv(LibraryEnv, tc.path)
			if _, err := FindLibrary(""); !errors.Is(err, tc.is) || !strings.Contains(err.Error(), LibraryEnv) {
				t.Fatalf("via %s: %v", LibraryEnv, err)
			}
		})
	}
	t.Run("nothing found", func(t *testing.T) {
		t.Setenv(LibraryEnv, "")
		t.Setenv("XDG_CACHE_HOME", dir)
		_, err := FindLibrary("")
		if errors.Is(err, ErrLibraryNotFound) {
			for _, w := range []string{"tried", dir, "make setup", LibraryEnv} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		}
	})
}

func TestAcquireRelease(t *testing.T) {
	needLib(t)
	if err := Acquire(""); err != nil {
		t.Fatal(err)
	}
	if Version() == "" || LibraryPath() == "" {
		t.Error("no version or path while acquired")
	}
	if err := Acquire("/elsewhere/libonnxruntime.so.1"); !errors.Is(err, ErrLibraryLoad) {
		t.Errorf("second library: %v", err)
	}
	if err := Release(); err != nil {
		t.Fatal(err)
	}
}

func (s *Session) activeRuns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.active)
}
