package store

import (
	"bufio"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// vmRSS returns the process's resident set from /proc/self/status: heap
// and the pages of bbolt's memory map it has touched.
func vmRSS(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status:", err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Skip("no VmRSS")
	return 0
}

// writeRandomFile streams size random bytes to path (never all in memory)
// and returns their sha256.
func writeRandomFile(t testing.TB, path string, size int64, seed uint64) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	buf := make([]byte, 4<<20)
	for done := int64(0); done < size; {
		n := min(int64(len(buf)), size-done)
		r.Read(buf[:n])
		w.Write(buf[:n])
		done += n
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// importRSS imports a bundle with a size-byte model.onnx and returns the
// peak growth of VmRSS over the import, sampled every 5 ms.
func importRSS(t *testing.T, size int64) int64 {
	ctx := context.Background()
	tmp := t.TempDir()
	bundle := filepath.Join(tmp, "bundle")
	writeRandomFile(t, filepath.Join(bundle, "model.onnx"), size, 50)
	sealBundle(t, bundle, "big", "1")
	s := openTestStore(t, filepath.Join(tmp, "models.db"))

	runtime.GC()
	debug.FreeOSMemory()
	base := vmRSS(t)
	var peak int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, vmRSS(t))
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	start := time.Now()
	_, err := s.Import(ctx, bundle, nil)
	el := time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	growth := peak - base
	t.Logf("import of %d MiB: %v (%.0f MB/s), VmRSS %d MiB -> peak %d MiB: growth %d MiB",
		size>>20, el.Round(time.Millisecond), float64(size)/1e6/el.Seconds(), base>>20, peak>>20, growth>>20)
	return growth
}

func TestImportMemoryBounded(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("imports 128 MiB; RSS under -race says nothing")
	}
	if g := importRSS(t, 128<<20); g > 64<<20 {
		t.Errorf("RSS grew %d MiB importing 128 MiB", g>>20)
	}
}

// TestImportMemory1GB is the bar: a 1 GB bundle imports with less
// than 64 MB RSS growth. Opt-in: EDGEINFER_STORE_BIG=1.
func TestImportMemory1GB(t *testing.T) {
	if os.Getenv("EDGEINFER_STORE_BIG") == "" {
		t.Skip("set EDGEINFER_STORE_BIG=1 to import 1 GiB")
	}
	if g := importRSS(t, 1<<30); g > 64<<20 {
		t.Errorf("RSS grew %d MiB importing 1 GiB", g>>20)
	}
}
