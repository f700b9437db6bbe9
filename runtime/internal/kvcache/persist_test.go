package kvcache

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// persistCache builds a cache of dt with room for blocks and computes a
// prompt of n tokens into it with distinct values per position, layer
// and head; it returns the cache and the freed sequence's tokens.
func persistCache(t *testing.T, dt DType, blocks, n int) (*Cache, []int32) {
	t.Helper()
	cfg := tinyConfig(blocks)
	cfg.DType = dt
	cfg.BudgetBytes = int64(blocks) * cfg.BlockBytes()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	prompt := seqTokens(n, 100)
	s, err := c.NewSequence(prompt)
	if err != nil {
		t.Fatal(err)
	}
	writeSteps(t, c, s, n, 1)
	s.Free()
	return c, prompt
}

// blockBytesOf is block b's contents as the file stores them.
func blockBytesOf(c *Cache, b int32) []byte {
	buf := make([]byte, c.cfg.BlockBytes())
	c.readBlock(buf, b)
	return buf
}

// restoredSequence opens path into a fresh cache like c and starts a
// sequence for prompt, returning the new cache and the sequence.
func restoredSequence(t *testing.T, c *Cache, path string, key []byte, prompt []int32) (*Cache, *Sequence) {
	t.Helper()
	d, err := New(c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	p, err := OpenPersisted(path, key, c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.UsePersisted(p)
	s, err := d.NewSequence(prompt)
	if err != nil {
		t.Fatal(err)
	}
	return d, s
}

// TestPersistRoundTrip: a prompt's computed blocks saved by one cache are
// restored by the next, byte for byte (int8 scales included), when a
// prompt asks for them, and only then.
func TestPersistRoundTrip(t *testing.T) {
	for _, dt := range []DType{Float32, Int8, Float16} {
		t.Run(dt.String(), func(t *testing.T) {
			c, prompt := persistCache(t, dt, 16, 21) // 5 full blocks of 4
			snap := c.Snapshot(1 << 20)
			if snap.Blocks() != 5 {
				t.Fatalf("snapshot holds %d blocks, want the prompt's 5 full ones", snap.Blocks())
			}
			path := filepath.Join(t.TempDir(), "m.kv")
			key := []byte("model digest 1")
			if _, err := snap.WriteFile(path, key); err != nil {
				t.Fatal(err)
			}
			// In place (no copy) writes the same file.
			inPlace := filepath.Join(t.TempDir(), "m.kv")
			if _, err := c.SnapshotInPlace(1<<20).WriteFile(inPlace, key); err != nil {
				t.Fatal(err)
			}
			if a, b := readAll(t, path), readAll(t, inPlace); !bytes.Equal(a, b) {
				t.Errorf("in-place snapshot wrote %d bytes unlike the copy's %d", len(b), len(a))
			}
			d, s := restoredSequence(t, c, path, key, append(prompt[:20:20], 7, 8, 9))
			if got := d.Stats().PrefixRestoredBlocks; got != 5 {
				t.Errorf("restored %d blocks, want 5", got)
			}
			if s.Computed() != 20 || s.Cached() != 20 {
				t.Fatalf("restored sequence has %d computed, %d cached tokens; want 20", s.Computed(), s.Cached())
			}
			old, _ := c.NewSequence(prompt)
			for i := range 5 {
				if !bytes.Equal(blockBytesOf(d, s.blocks[i]), blockBytesOf(c, old.blocks[i])) {
					t.Errorf("block %d differs after the round trip", i)
				}
			}
			// Restored blocks are prefix entries like computed ones: a
			// second sequence shares them without reading the file.
			s2, _ := d.NewSequence(prompt)
			if s2.Computed() != 20 || d.Stats().PrefixRestoredBlocks != 5 {
				t.Errorf("second sequence: %d computed, %d restored", s2.Computed(), d.Stats().PrefixRestoredBlocks)
			}
			if d.Lookup(prompt) != 20 {
				t.Errorf("Lookup %d, want 20", d.Lookup(prompt))
			}
		})
	}
}

// TestPersistLookupCountsTheFile: admission's estimate counts what the file
// can restore before anything is restored.
func TestPersistLookupCountsTheFile(t *testing.T) {
	c, prompt := persistCache(t, Float32, 16, 21)
	path := filepath.Join(t.TempDir(), "m.kv")
	if _, err := c.Snapshot(1<<20).WriteFile(path, nil); err != nil {
		t.Fatal(err)
	}
	d, err := New(c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p, err := OpenPersisted(path, nil, c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.UsePersisted(p)
	if got := d.Lookup(prompt); got != 20 {
		t.Errorf("Lookup %d before any restore, want 20", got)
	}
	if d.Stats().PrefixRestoredBlocks != 0 {
		t.Error("Lookup restored blocks")
	}
}

// TestPersistStaleAndCorrupt: a file for another model or geometry is
// stale; a torn, truncated or altered one is corrupt; a record altered
// after the index was read is never served.
func TestPersistStaleAndCorrupt(t *testing.T) {
	c, prompt := persistCache(t, Float32, 16, 21)
	dir := t.TempDir()
	path := filepath.Join(dir, "m.kv")
	key := []byte("v1")
	if _, err := c.Snapshot(1<<20).WriteFile(path, key); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(path)

	if _, err := OpenPersisted(filepath.Join(dir, "none.kv"), key, c.cfg); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := OpenPersisted(path, []byte("v2"), c.cfg); !errors.Is(err, ErrStale) {
		t.Errorf("other key: %v, want ErrStale", err)
	}
	other := c.cfg
	other.HeadDim = 8
	if _, err := OpenPersisted(path, key, other); !errors.Is(err, ErrStale) {
		t.Errorf("other geometry: %v, want ErrStale", err)
	}
	other = c.cfg
	other.DType = Int8
	if _, err := OpenPersisted(path, key, other); !errors.Is(err, ErrStale) {
		t.Errorf("other dtype: %v, want ErrStale", err)
	}
	bad := func(name string, b []byte) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenPersisted(p, key, c.cfg); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	bad("torn", good[:len(good)-100])
	bad("empty", nil)
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		return b
	}
	bad("index", flip(60)) // inside the first index entry
	bad("magic", flip(0))

	// A record altered: the index opens, the block is refused when read,
	// and the sequence stops its cached prefix before it.
	rec := int(c.cfg.BlockBytes()) + 4
	p := filepath.Join(dir, "record")
	if err := os.WriteFile(p, flip(len(good)-3*rec+5), 0o644); err != nil { // block 2 of 5
		t.Fatal(err)
	}
	d, s := restoredSequence(t, c, p, key, prompt)
	if s.Computed() != 8 {
		t.Errorf("with block 2 altered, %d tokens restored; want the 8 before it", s.Computed())
	}
	if st := d.Stats(); st.PrefixRestoreFailures != 1 || st.PrefixRestoredBlocks != 2 {
		t.Errorf("restored %d, failures %d; want 2 and 1", st.PrefixRestoredBlocks, st.PrefixRestoreFailures)
	}
}

// TestPersistBudgetAndCarry: a snapshot takes whole chains from the root
// within its byte budget; a cache that restored only part of a file
// carries the rest over into its own snapshot.
func TestPersistBudgetAndCarry(t *testing.T) {
	c, prompt := persistCache(t, Float32, 16, 21)
	if got := c.Snapshot(2 * c.cfg.persistedBytes()).Blocks(); got != 2 {
		t.Errorf("a budget of 2 blocks took %d", got)
	}
	dir := t.TempDir()
	full := filepath.Join(dir, "full.kv")
	if _, err := c.Snapshot(1<<20).WriteFile(full, nil); err != nil {
		t.Fatal(err)
	}
	// d asks only for the first 2 blocks, then saves.
	d, s := restoredSequence(t, c, full, nil, prompt[:9])
	if s.Computed() != 8 {
		t.Fatalf("%d restored, want 8", s.Computed())
	}
	s.Free()
	snap := d.Snapshot(1 << 20)
	if snap.Blocks() != 5 {
		t.Fatalf("snapshot after a partial restore holds %d blocks, want 2 restored + 3 carried", snap.Blocks())
	}
	next := filepath.Join(dir, "next.kv")
	if _, err := snap.WriteFile(next, nil); err != nil {
		t.Fatal(err)
	}
	e, s3 := restoredSequence(t, c, next, nil, prompt)
	if s3.Computed() != 20 {
		t.Errorf("from the carried file %d tokens restored, want 20", s3.Computed())
	}
	old, _ := c.NewSequence(prompt)
	for i := range 5 {
		if !bytes.Equal(blockBytesOf(e, s3.blocks[i]), blockBytesOf(c, old.blocks[i])) {
			t.Errorf("block %d differs after being carried", i)
		}
	}
}

// FuzzOpenPersisted: whatever bytes lie at the path, opening them fails
// cleanly or yields an index whose restores are checked.
func FuzzOpenPersisted(f *testing.F) {
	cfg := tinyConfig(8)
	c, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	s, _ := c.NewSequence(seqTokens(9, 1))
	if err := s.Reserve(9); err != nil {
		f.Fatal(err)
	}
	if err := s.MarkComputed(9); err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(f.TempDir(), "seed.kv")
	if _, err := c.Snapshot(1<<20).WriteFile(path, []byte("k")); err != nil {
		f.Fatal(err)
	}
	c.Close()
	seed, _ := os.ReadFile(path)
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add([]byte(persistMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "f.kv")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		per, err := OpenPersisted(p, []byte("k"), cfg)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrStale) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		d, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		d.UsePersisted(per)
		seq, err := d.NewSequence(seqTokens(9, 1))
		if err != nil {
			t.Fatal(err)
		}
		if seq.Computed() > 8 {
			t.Fatalf("restored %d tokens of a 9-token prompt", seq.Computed())
		}
	})
}

func readAll(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkSnapshot: what a save costs the device loop, the copy of the
// cached prefix out of the pools (Snapshot; the file is written by another
// goroutine), on synthetic-110m's geometry at the default 64 MiB bound.
func BenchmarkSnapshot(b *testing.B) {
	cfg := Config{Layers: 12, KVHeads: 4, HeadDim: 64, BlockSize: 16}
	cfg.BudgetBytes = 256 << 20
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	n := int(cfg.BudgetBytes/cfg.BlockBytes()) * cfg.BlockSize / 2
	s, _ := c.NewSequence(seqTokens(n, 1))
	if err := s.Reserve(n); err != nil {
		b.Fatal(err)
	}
	if err := s.MarkComputed(n); err != nil {
		b.Fatal(err)
	}
	s.Free()
	var blocks int
	for b.Loop() {
		blocks = c.Snapshot(64 << 20).Blocks()
	}
	b.ReportMetric(float64(blocks), "blocks")
	b.SetBytes(int64(blocks) * cfg.BlockBytes())
}

// TestPrefaultRestore: the pool pages of the lowest n blocks, which a
// restore fills first, are resident after PrefaultRestore(n), and those of
// the blocks after them are not.
func TestPrefaultRestore(t *testing.T) {
	cfg := Config{Layers: 2, KVHeads: 2, HeadDim: 64, BlockSize: 16, Options: Options{DisableHugePages: true}}
	cfg.BudgetBytes = 256 * cfg.BlockBytes()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.PrefaultRestore(8)
	resident := func(b int) bool {
		region := c.mem.keyBytes[1][c.headStride*4+b*c.blockElems*4:][:c.blockElems*4] // layer 1, head 1
		vec := make([]byte, 2)
		if err := mincore(region, vec); err != nil {
			t.Skipf("mincore: %v", err)
		}
		return vec[0]&1 == 1
	}
	if !resident(0) || !resident(7) {
		t.Error("blocks 0 and 7 not resident after PrefaultRestore(8)")
	}
	if resident(200) {
		t.Error("block 200 resident: PrefaultRestore(8) committed more than it needs")
	}
}

// TestSnapshotReused: a computed prompt is in Snapshot but not in
// SnapshotReused until a later sequence takes its blocks, from the pools or
// from the file; ReusedVersion counts each block's first reuse only, and an
// evicted block's reuse goes with it.
func TestSnapshotReused(t *testing.T) {
	c, prompt := persistCache(t, Float32, 16, 21) // 5 full blocks of 4
	if all, reused := c.Snapshot(1<<20).Blocks(), c.SnapshotReused(1<<20).Blocks(); all != 5 || reused != 0 || c.ReusedVersion() != 0 {
		t.Fatalf("computed once: %d blocks in Snapshot, %d in SnapshotReused, ReusedVersion %d; want 5, 0, 0", all, reused, c.ReusedVersion())
	}
	s, err := c.NewSequence(prompt[:13]) // its first 3 blocks
	if err != nil {
		t.Fatal(err)
	}
	s.Free()
	if got := c.SnapshotReused(1 << 20).Blocks(); got != 3 || c.ReusedVersion() != 3 {
		t.Errorf("after a prompt took 3 blocks: %d reused blocks snapshotted, ReusedVersion %d; want 3, 3", got, c.ReusedVersion())
	}
	s, _ = c.NewSequence(prompt)
	s.Free()
	if got := c.SnapshotReused(1 << 20).Blocks(); got != 5 || c.ReusedVersion() != 5 {
		t.Errorf("after the whole prompt again: %d, ReusedVersion %d; want 5, 5", got, c.ReusedVersion())
	}

	path := filepath.Join(t.TempDir(), "m.kv")
	if _, err := c.Snapshot(1<<20).WriteFile(path, nil); err != nil {
		t.Fatal(err)
	}
	d, _ := restoredSequence(t, c, path, nil, prompt)
	if got := d.SnapshotReused(1 << 20).Blocks(); got != 5 || d.ReusedVersion() != 5 {
		t.Errorf("restored from the file: %d reused blocks, ReusedVersion %d; want 5, 5", got, d.ReusedVersion())
	}

	// Evicted: a prompt that needs every block takes the cached ones, and
	// their reuse leaves with them: its own blocks, computed once, are not
	// reused.
	other, err := c.NewSequence(seqTokens(16*4, 5000))
	if err != nil {
		t.Fatal(err)
	}
	writeSteps(t, c, other, 16*4, 1)
	other.Free()
	if all, reused := c.Snapshot(1<<20).Blocks(), c.SnapshotReused(1<<20).Blocks(); all != 16 || reused != 0 {
		t.Errorf("after eviction by a prompt computed once: %d blocks cached, %d of them reused; want 16, 0", all, reused)
	}
}
