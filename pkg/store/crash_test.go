package store

import (
	"bytes"
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

const crashModel = "crash"

// crashFiles is the content of version v: deterministic, so the parent can
// check any version a killed child left, and mostly shared between
// versions, as real model versions are.
func crashFiles(v string) map[string][]byte {
	h := fnv.New64a()
	h.Write([]byte(v))
	w := randBytes(7, 1<<20)
	copy(w[300<<10:], randBytes(h.Sum64(), 64<<10))
	return map[string][]byte{"model.onnx": w, "tokenizer.json": []byte(`{"v":"` + v + `"}`)}
}

// TestCrashSafety SIGKILLs a child that imports, activates, rolls back,
// removes and collects in a loop, at random points, and checks after every
// kill that the store opens, verifies, shows no partial version, and that
// every visible version (the one active before the kill included) reads
// back byte-identical.
func TestCrashSafety(t *testing.T) {
	trials := 50
	if testing.Short() {
		trials = 10
	}
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "models.db")
	s := openTestStore(t, db)
	importFiles(t, s, crashModel, "base", crashFiles("base"))
	s.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	for trial := range trials {
		s, err := Open(ctx, db, Options{})
		if err != nil {
			t.Fatalf("trial %d: open: %v", trial, err)
		}
		before, err := s.Resolve(ctx, crashModel)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		s.Close()

		cmd := startChild(t, "churn", db)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(10+rng.IntN(250)) * time.Millisecond) // on purpose: the kill lands at a random moment
		cmd.Process.Signal(syscall.SIGKILL)
		err = cmd.Wait()
		var ee interface{ Sys() any }
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && !ws.Signaled() {
				t.Fatalf("trial %d: child exited by itself: %v", trial, err)
			}
		}

		s, err = Open(ctx, db, Options{})
		if err != nil {
			t.Fatalf("trial %d: open after kill: %v", trial, err)
		}
		if _, err := s.Verify(ctx, nil); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		for e, err := range s.List(ctx) {
			if err != nil || e.Err != nil {
				t.Fatalf("trial %d: list: %v %v", trial, err, e.Err)
			}
			for p, want := range crashFiles(e.Ref.Version) {
				got, err := s.ReadFile(ctx, e.Ref.String(), p)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("trial %d: %s %s: partial or wrong version (err %v)", trial, e.Ref, p, err)
				}
			}
		}
		if _, err := s.ReadFile(ctx, before.Ref().String(), "model.onnx"); err != nil {
			t.Fatalf("trial %d: version active before the kill: %v", trial, err)
		}
		if _, err := s.Resolve(ctx, crashModel); err != nil {
			t.Fatalf("trial %d: active after kill: %v", trial, err)
		}
		st, _ := s.Stats(ctx)
		s.Close()
		if trial == trials-1 {
			t.Logf("%d kills in %v; store has %d versions, %d chunks", trials, time.Since(start).Round(time.Millisecond), st.Versions, st.Chunks)
		}
	}
}
