package llm

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
)

// TestSaveWhileServingKeepsReused: saves while serving keep the chains a
// later prompt reused and nothing else, so prompts that never repeat
// neither copy nor write anything however long the device serves them; a
// reused chain is saved once, not again while nothing new is reused; the
// clean stop saves every chain that fits.
func TestSaveWhileServingKeepsReused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.kv")
	key := []byte("version digest")
	m := loadTiny(t, Options{Persist: PersistOptions{Path: path, Key: key, Every: time.Nanosecond}})
	vocab, bs := m.Geometry().Vocab, m.cache.Config().BlockSize
	distinct := func(k int) []int32 {
		p := prompt(40, vocab)
		for i := range p {
			p[i] = (p[i] + int32(k*101)) % int32(vocab)
		}
		return p
	}
	serve := func(p []int32) {
		collect(t, m, p, GenerateOptions{MaxTokens: 2})
		m.Maintain(time.Now())
	}
	blocksInFile := func() int {
		t.Helper()
		if m.persist.writing { // the writer's result, as Maintain's next call would take it
			if err := <-m.persist.done; err != nil {
				t.Fatal(err)
			}
			m.persist.writing = false
		}
		p, err := kvcache.OpenPersisted(path, key, m.cache.Config())
		if errors.Is(err, fs.ErrNotExist) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		return p.Blocks()
	}

	for k := 1; k <= 6; k++ {
		serve(distinct(k))
		if m.persist.writing {
			t.Fatalf("after %d prompts that never repeat, a save while serving started", k)
		}
	}
	if n := blocksInFile(); n != 0 {
		t.Fatalf("prompts that never repeat left %d blocks in the file", n)
	}

	system := distinct(0)
	serve(system)
	serve(system) // the second takes the first's blocks: reused
	want := (len(system) - 1) / bs
	if n := blocksInFile(); n != want {
		t.Errorf("after a prompt reused once, the file holds %d blocks; want its %d full blocks", n, want)
	}
	info, _ := os.Stat(path)
	serve(system)
	serve(distinct(7))
	if m.persist.writing {
		t.Error("a save started though no chain was reused for the first time since the last")
	}
	if after, _ := os.Stat(path); !after.ModTime().Equal(info.ModTime()) {
		t.Error("the file was written again though nothing new was reused")
	}

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if n := blocksInFile(); n < 8*want {
		t.Errorf("the clean stop saved %d blocks; want every chain's (8 prompts of %d full blocks)", n, want)
	}
}
