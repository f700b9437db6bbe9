package store

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestCorruption flips bytes inside one chunk's data in the closed bbolt
// file: Verify names the model and file, reading it is ErrIntegrity, and
// the other model still loads.
func TestCorruption(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "models.db")
	s := openTestStore(t, db)
	good := randBytes(10, 600<<10)
	victim := randBytes(11, 600<<10)
	importFiles(t, s, "good", "1", map[string][]byte{"model.onnx": good})
	importFiles(t, s, "victim", "3", map[string][]byte{"model.onnx": victim, "tokenizer.json": []byte("{}")})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	raw, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(raw, victim[300<<10:300<<10+64])
	if at < 0 {
		t.Fatal("chunk bytes not found in the store file")
	}
	raw[at+10] ^= 0xff
	if err := os.WriteFile(db, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	s = openTestStore(t, db)
	rep, err := s.Verify(ctx, nil)
	if !errors.Is(err, ErrIntegrity) || len(rep.Damaged) != 1 {
		t.Fatalf("verify = %+v, %v", rep, err)
	}
	if d := rep.Damaged[0]; d.Ref.String() != "victim@3" || d.File != "model.onnx" {
		t.Fatalf("damage names %v", d)
	}
	_, err = s.ReadFile(ctx, "victim", "model.onnx")
	if !errors.Is(err, ErrIntegrity) || !strings.Contains(err.Error(), "victim@3") || !strings.Contains(err.Error(), "model.onnx") {
		t.Fatalf("read of corrupt file: %v", err)
	}
	if _, err := s.Export(ctx, "victim", t.TempDir()); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("export of corrupt file: %v", err)
	}
	if b, err := s.ReadFile(ctx, "victim", "tokenizer.json"); err != nil || string(b) != "{}" {
		t.Fatalf("undamaged file of the damaged model: %q %v", b, err)
	}
	if b, err := s.ReadFile(ctx, "good", "model.onnx"); err != nil || !bytes.Equal(b, good) {
		t.Fatalf("other model: %v", err)
	}
}

// TestLockedByAnotherProcess: a second process gets ErrLocked naming the
// holder, within the lock timeout, not a hang.
func TestLockedByAnotherProcess(t *testing.T) {
	db := filepath.Join(t.TempDir(), "models.db")
	s := openTestStore(t, db)
	s.Close()
	cmd := startChild(t, "hold", db)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	start := time.Now()
	_, err := Open(context.Background(), db, Options{LockTimeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("open of a held store: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %v", el)
	}
	if want := fmt.Sprintf("pid %d?", cmd.Process.Pid); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %s", err, want)
	}
	t.Log(err)
}

// TestDiskFull imports a bundle bigger than a small tmpfs: ErrNoSpace
// wrapping ENOSPC, the store intact, and usable again after GC.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	ctx := context.Background()
	db := filepath.Join(dir, "models.db")
	s := openTestStore(t, db)
	small := randBytes(20, 1<<20)
	importFiles(t, s, "small", "1", map[string][]byte{"model.onnx": small})

	_, err := s.Import(ctx, bundleDir(t, "big", "1", randBytes(21, 12<<20)), nil)
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("import over capacity: %v", err)
	}
	t.Log(err)
	if _, err := s.Verify(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := s.ReadFile(ctx, "small", "model.onnx"); err != nil || !bytes.Equal(b, small) {
		t.Fatalf("previous version after ENOSPC: %v", err)
	}
	if _, err := s.Resolve(ctx, "big@1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("partial version visible: %v", err)
	}
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(ctx, bundleDir(t, "small", "2", randBytes(22, 1<<20)), nil); err != nil {
		t.Fatalf("small import after GC: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, db)
	if _, err := s.Verify(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func bundleDir(t *testing.T, name, version string, model []byte) string {
	dir := t.TempDir()
	writeBundle(t, dir, name, version, map[string][]byte{"model.onnx": model})
	return dir
}

// TestReadersDuringImport loads models from several goroutines while
// versions are imported and activated (run with -race).
func TestReadersDuringImport(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t, filepath.Join(t.TempDir(), "models.db"))
	base := randBytes(30, 2<<20)
	importFiles(t, s, "m", "0", map[string][]byte{"model.onnx": base})
	dirs := make([]string, 4)
	for i := range dirs {
		w := bytes.Clone(base)
		copy(w[1<<20:], randBytes(uint64(31+i), 200<<10))
		dirs[i] = bundleDir(t, "m", fmt.Sprint(i+1), w)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.ReadFile(ctx, "m", "model.onnx"); err != nil {
					errs <- err
					return
				}
				for _, err := range s.List(ctx) {
					if err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	for i, dir := range dirs {
		if _, err := s.Import(ctx, dir, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Activate(ctx, fmt.Sprintf("m@%d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
