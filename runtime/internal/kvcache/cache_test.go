package kvcache

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/edgeinfer/edgeinfer/pkg/f16"
	"golang.org/x/sys/unix"
)

func tinyConfig(blocks int) Config {
	cfg := Config{Layers: 2, KVHeads: 2, HeadDim: 4, BlockSize: 4}
	cfg.BudgetBytes = int64(blocks) * cfg.BlockBytes()
	return cfg
}

func newTiny(t *testing.T, blocks int) *Cache { t.Helper(); return newTinyOf(t, blocks, Float32) }

// newTinyOf is newTiny with pools of element type dt (the budget holds the
// blocks at dt's size).
func newTinyOf(t *testing.T, blocks int, dt DType) *Cache {
	t.Helper()
	cfg := tinyConfig(blocks)
	cfg.DType = dt
	cfg.BudgetBytes = int64(blocks) * cfg.BlockBytes()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func seqTokens(n int, base int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = base + int32(i)
	}
	return out
}

// compute runs n tokens of s through reserve, slots, scatter (of zeros) and
// mark computed.
func compute(t *testing.T, c *Cache, s *Sequence, n int) {
	t.Helper()
	if err := s.Reserve(n); err != nil {
		t.Fatal(err)
	}
	slots, err := s.Slots(nil, n)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.Config()
	k := make([][]float32, cfg.Layers)
	for l := range k {
		k[l] = make([]float32, cfg.KVHeads*n*cfg.HeadDim)
	}
	if err := c.Scatter(k, k, 1, n, slots); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkComputed(n); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Layers: 12, KVHeads: 4, HeadDim: 64, BlockSize: 16, Options: Options{BudgetBytes: 1 << 30}}
	tests := []struct {
		name   string
		edit   func(*Config)
		errHas string
	}{
		{"fp32", func(*Config) {}, ""},
		{"int8", func(c *Config) { c.DType = Int8 }, ""},
		{"zero layers", func(c *Config) { c.Layers = 0 }, "layers 0"},
		{"zero heads", func(c *Config) { c.KVHeads = 0 }, "kv heads 0"},
		{"zero head dim", func(c *Config) { c.HeadDim = 0 }, "head dim 0"},
		{"block size 0", func(c *Config) { c.BlockSize = 0 }, "block size 0"},
		{"negative block size", func(c *Config) { c.BlockSize = -16 }, "block size -16"},
		{"unknown dtype", func(c *Config) { c.DType = 7 }, "dtype"},
		{"budget below one block", func(c *Config) { c.BudgetBytes = c.BlockBytes() - 1 }, "smaller than one block"},
		{"zero budget", func(c *Config) { c.BudgetBytes = 0 }, "smaller than one block"},
		{"absurd geometry", func(c *Config) { c.Layers, c.HeadDim = math.MaxInt32, 1<<30 }, "implausibly large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.edit(&cfg)
			err := cfg.Validate()
			if tt.errHas == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.errHas) || !strings.HasPrefix(err.Error(), "kvcache: ") {
				t.Fatalf("err = %v, want ErrInvalidConfig mentioning %q", err, tt.errHas)
			}
			if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New: %v", err)
			}
		})
	}
}

func TestGeometry(t *testing.T) {
	for _, dt := range []DType{Float32, Int8} {
		t.Run(dt.String(), func(t *testing.T) {
			cfg := Config{Layers: 3, KVHeads: 2, HeadDim: 8, BlockSize: 16, DType: dt}
			cfg.BudgetBytes = 10*cfg.BlockBytes() + cfg.BlockBytes()/2
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.NumBlocks() != 10 || c.FreeBlocks() != 10 {
				t.Fatalf("blocks %d free %d, want 10", c.NumBlocks(), c.FreeBlocks())
			}
			if !slices.Equal(c.PoolShape(), []int64{2, 10, 16, 8}) || !slices.Equal(c.ScaleShape(), []int64{2, 10}) {
				t.Fatalf("shapes %v %v", c.PoolShape(), c.ScaleShape())
			}
			elems := 2 * 10 * 16 * 8
			for l := range 3 {
				if len(c.KeyPoolBytes(l)) != elems*dt.Size() || len(c.ValuePoolBytes(l)) != elems*dt.Size() {
					t.Fatalf("layer %d: %d bytes", l, len(c.KeyPoolBytes(l)))
				}
				for _, b := range c.KeyPoolBytes(l) {
					if b != 0 {
						t.Fatal("pool not zeroed")
					}
				}
				if dt == Float32 {
					if len(c.KeyPool(l)) != elems || c.KeyPoolInt8(l) != nil || c.KeyScales(l) != nil {
						t.Fatal("fp32 accessors")
					}
				} else if len(c.ValuePoolInt8(l)) != elems || len(c.ValueScales(l)) != 20 || c.ValuePool(l) != nil {
					t.Fatal("int8 accessors")
				}
			}
			if c.KeyPoolBytes(3) != nil || c.KeyPoolBytes(-1) != nil {
				t.Fatal("bad layer gives a pool")
			}
			if got := c.SlotOffset(1, 5*16+3); got != 1*10*16*8+(5*16+3)*8 {
				t.Fatalf("slot offset %d", got)
			}
			if st := c.Stats(); st.BytesTotal != 10*cfg.BlockBytes() || st.BlocksFree != 10 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestPrefixSharing(t *testing.T) {
	tests := []struct {
		name        string
		prompt      int // tokens
		computed    int // computed by the first sequence before the second starts
		wantReused  int
		freeFirst   bool
		wantBlocks  int // blocks used after the second sequence attaches
		wantCachedB int // cached (unreferenced) blocks then
		wantOther   int // reused tokens of a prompt sharing only the first block
	}{
		{"full blocks shared", 10, 10, 8, false, 3, 0, 4},
		{"last token always recomputed", 8, 8, 4, false, 2, 0, 4},
		{"uncomputed blocks not shared", 10, 3, 0, false, 1, 0, 0},
		{"kept after free", 10, 10, 8, true, 2, 0, 4},
		{"one block prompt", 4, 4, 0, true, 0, 1, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTiny(t, 8)
			prompt := seqTokens(tt.prompt, 100)
			a, _ := c.NewSequence(prompt)
			compute(t, c, a, tt.computed)
			if tt.freeFirst {
				a.Free()
			}
			if got := c.Lookup(prompt); got != tt.wantReused {
				t.Fatalf("Lookup = %d, want %d", got, tt.wantReused)
			}
			b, _ := c.NewSequence(prompt)
			if b.Computed() != tt.wantReused || b.Cached() != tt.wantReused {
				t.Fatalf("computed %d cached %d, want %d", b.Computed(), b.Cached(), tt.wantReused)
			}
			st := c.Stats()
			if st.BlocksUsed != tt.wantBlocks || st.BlocksCached != tt.wantCachedB {
				t.Fatalf("used %d cached %d, want %d %d", st.BlocksUsed, st.BlocksCached, tt.wantBlocks, tt.wantCachedB)
			}
			if st.PrefixHitTokens != int64(tt.wantReused) || st.PrefixQueryTokens != int64(2*tt.prompt) {
				t.Fatalf("hit tokens %d of %d", st.PrefixHitTokens, st.PrefixQueryTokens)
			}
			if err := c.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			// A different continuation shares only the common full blocks.
			other := append(slices.Clone(prompt[:4]), seqTokens(8, 900)...)
			if c.Lookup(other) != tt.wantOther {
				t.Fatalf("Lookup(other) = %d, want %d", c.Lookup(other), tt.wantOther)
			}
		})
	}
}

func TestPrefixCacheDisabled(t *testing.T) {
	cfg := tinyConfig(8)
	cfg.DisablePrefixCache = true
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, _ := c.NewSequence(seqTokens(10, 1))
	compute(t, c, a, 10)
	a.Free()
	b, _ := c.NewSequence(seqTokens(10, 1))
	if b.Computed() != 0 || c.Lookup(seqTokens(10, 1)) != 0 || c.Stats().BlocksCached != 0 {
		t.Fatal("prefix cache used while disabled")
	}
}

// TestNewSequenceUncached: a sequence that must compute every token takes
// nothing from the prefix cache, yet offers its own blocks to it.
func TestNewSequenceUncached(t *testing.T) {
	c := newTiny(t, 8)
	prompt := seqTokens(10, 1)
	a, _ := c.NewSequence(prompt)
	compute(t, c, a, 10)
	a.Free()
	b, _ := c.NewSequenceUncached(prompt)
	if b.Computed() != 0 || b.Cached() != 0 {
		t.Fatalf("uncached sequence starts with %d computed, %d cached", b.Computed(), b.Cached())
	}
	if c.Lookup(prompt) != 8 {
		t.Fatalf("Lookup = %d, want the first sequence's 8 tokens still cached", c.Lookup(prompt))
	}
	if err := c.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestForkCopyOnWrite(t *testing.T) {
	for _, dt := range []DType{Float32, Int8} {
		t.Run(dt.String(), func(t *testing.T) {
			c := newTinyOf(t, 8, dt)
			cfg := c.Config()
			parent, _ := c.NewSequence(seqTokens(6, 1))
			writeSteps(t, c, parent, 6, 1.0)
			child, err := parent.Fork()
			if err != nil {
				t.Fatal(err)
			}
			if c.Stats().BlocksUsed != 2 {
				t.Fatalf("fork allocated: %d blocks used", c.Stats().BlocksUsed)
			}
			// Slots of a shared partial block are refused until Reserve copies it.
			child.Append(7)
			if _, err := child.Slots(nil, 1); !errors.Is(err, ErrNotReserved) {
				t.Fatalf("slots of shared block: %v", err)
			}
			if !c.CanFit([]*Sequence{child}, 1) || child.BlocksNeeded(1) != 1 {
				t.Fatalf("blocks needed %d, want 1 (the copy)", child.BlocksNeeded(1))
			}
			before := snapshotBlock(c, parent.blocks[1])
			writeSteps(t, c, child, 1, 50.0) // larger values: int8 requantises the copy
			if parent.blocks[1] == child.blocks[1] || parent.blocks[0] != child.blocks[0] {
				t.Fatalf("blocks parent %v child %v", parent.blocks, child.blocks)
			}
			if got := snapshotBlock(c, parent.blocks[1]); !slices.Equal(got, before) {
				t.Fatal("child's write changed the parent's block")
			}
			// The copy holds the parent's two computed rows in every layer and head.
			for l := range cfg.Layers {
				for h := range cfg.KVHeads {
					for p := 4; p < 6; p++ {
						want := readRow(c, l, h, parent.blocks[1], p%4)
						got := readRow(c, l, h, child.blocks[1], p%4)
						// int8: the copy may since have been requantised to a larger scale.
						tol := float32(0)
						if dt == Int8 {
							tol = 1.5 * (c.KeyScales(l)[h*c.NumBlocks()+int(child.blocks[1])] + c.KeyScales(l)[h*c.NumBlocks()+int(parent.blocks[1])])
						}
						for i := range want {
							if abs32(got[i]-want[i]) > tol {
								t.Fatalf("layer %d head %d pos %d: copy %v, parent %v", l, h, p, got, want)
							}
						}
					}
				}
			}
			if err := c.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			parent.Free()
			child.Free()
			if err := c.checkInvariants(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// writeSteps computes n pending tokens of s one at a time, writing value
// scale*(position+1+head/10+layer/100) to every element.
func writeSteps(t *testing.T, c *Cache, s *Sequence, n int, scale float32) {
	t.Helper()
	cfg := c.Config()
	for range n {
		p := s.Computed()
		k := make([][]float32, cfg.Layers)
		for l := range k {
			k[l] = make([]float32, cfg.KVHeads*cfg.HeadDim)
			for h := range cfg.KVHeads {
				for e := range cfg.HeadDim {
					k[l][h*cfg.HeadDim+e] = scale * (float32(p+1) + float32(h)/10 + float32(l)/100)
				}
			}
		}
		if err := s.Reserve(1); err != nil {
			t.Fatal(err)
		}
		slots, err := s.Slots(nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Scatter(k, k, 1, 1, slots); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkComputed(1); err != nil {
			t.Fatal(err)
		}
	}
}

func readRow(c *Cache, l, h int, block int32, off int) []float32 {
	slot := int64(block)*int64(c.bs) + int64(off)
	row := make([]float32, c.cfg.HeadDim)
	if c.cfg.DType == Int8 {
		c.Dequantise(row, c.KeyPoolInt8(l), c.KeyScales(l), h, slot)
		return row
	}
	o := c.SlotOffset(h, slot)
	copy(row, c.KeyPool(l)[o:o+c.cfg.HeadDim])
	return row
}

func snapshotBlock(c *Cache, b int32) []float32 {
	var out []float32
	for l := range c.cfg.Layers {
		for h := range c.cfg.KVHeads {
			for off := range c.bs {
				out = append(out, readRow(c, l, h, b, off)...)
			}
		}
	}
	return out
}

func TestEvictionLRU(t *testing.T) {
	c := newTiny(t, 6)
	a, _ := c.NewSequence(seqTokens(9, 100)) // 2 full blocks + 1 token
	compute(t, c, a, 9)
	a.Free()
	b, _ := c.NewSequence(seqTokens(9, 500))
	compute(t, c, b, 9)
	b.Free()
	st := c.Stats()
	if st.BlocksCached != 4 || st.BlocksFree != 2 || st.Evictions != 0 {
		t.Fatalf("after frees: %+v", st)
	}
	// 3 blocks: 2 free, then evict the least recently used cached block:
	// a's last full block (tails go first).
	x, _ := c.NewSequence(seqTokens(12, 1000))
	if err := x.Reserve(12); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().Evictions; got != 1 {
		t.Fatalf("evictions %d, want 1", got)
	}
	if c.Lookup(seqTokens(9, 100)) != 4 || c.Lookup(seqTokens(9, 500)) != 8 {
		t.Fatalf("lookups a %d b %d, want 4 and 8", c.Lookup(seqTokens(9, 100)), c.Lookup(seqTokens(9, 500)))
	}
	// Attaching b's prefix makes it most recently used; the next evictions
	// take a's first block, then nothing referenced.
	y, _ := c.NewSequence(seqTokens(9, 500))
	if y.Computed() != 8 {
		t.Fatalf("y computed %d", y.Computed())
	}
	if err := x.Reserve(0); err != nil {
		t.Fatal(err)
	}
	z, _ := c.NewSequence(seqTokens(4, 2000))
	if err := z.Reserve(4); err != nil {
		t.Fatal(err)
	}
	if c.Lookup(seqTokens(9, 100)) != 0 || c.Stats().Evictions != 2 {
		t.Fatalf("a still cached: %d, evictions %d", c.Lookup(seqTokens(9, 100)), c.Stats().Evictions)
	}
	if err := c.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestOutOfBlocks(t *testing.T) {
	c := newTiny(t, 4)
	s, _ := c.NewSequence(seqTokens(20, 1))
	err := s.Reserve(20)
	var oob *OutOfBlocksError
	if !errors.Is(err, ErrOutOfBlocks) || !errors.As(err, &oob) || oob.Needed != 5 || oob.Free != 4 {
		t.Fatalf("err = %v", err)
	}
	if want := "kvcache: reserve: out of blocks (need 5, 4 free)"; err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}
	if s.NumBlocks() != 0 || c.Stats().BlocksUsed != 0 || c.CanFit([]*Sequence{s}, 20) || !c.CanFit([]*Sequence{s}, 16) {
		t.Fatal("failed reserve changed state or CanFit disagrees")
	}
	if c.CanFitEach([]*Sequence{s, s}, []int{8, 9}) || !c.CanFitEach([]*Sequence{s, s}, []int{8, 8}) {
		t.Fatal("CanFitEach")
	}
	if err := s.Reserve(21); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("reserve beyond known tokens: %v", err)
	}
}

func TestPreemptResume(t *testing.T) {
	c := newTiny(t, 8)
	s, _ := c.NewSequence(seqTokens(10, 1))
	compute(t, c, s, 10)
	s.Append(77)
	if err := s.Preempt(); err != nil {
		t.Fatal(err)
	}
	if s.NumBlocks() != 0 || s.Computed() != 0 || s.Len() != 11 || c.Stats().BlocksUsed != 0 || c.Stats().Preemptions != 1 {
		t.Fatalf("after preempt: blocks %d computed %d len %d stats %+v", s.NumBlocks(), s.Computed(), s.Len(), c.Stats())
	}
	n, err := s.Resume()
	if err != nil || n != 8 || s.Computed() != 8 {
		t.Fatalf("resume = %d, %v", n, err)
	}
	if _, err := s.Resume(); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("second resume: %v", err)
	}
	compute(t, c, s, 3)
	if err := c.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestFreedAndClosed(t *testing.T) {
	c, err := New(tinyConfig(4))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.NewSequence(seqTokens(3, 1))
	s.Free()
	s.Free()
	for name, err := range map[string]error{
		"append":  s.Append(1),
		"reserve": s.Reserve(0),
		"preempt": s.Preempt(),
		"mark":    s.MarkComputed(0),
	} {
		if !errors.Is(err, ErrSequenceFreed) {
			t.Errorf("%s after free: %v", name, err)
		}
	}
	if _, err := s.Fork(); !errors.Is(err, ErrSequenceFreed) {
		t.Errorf("fork after free: %v", err)
	}
	live, _ := c.NewSequence(seqTokens(3, 1))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := live.Append(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	live.Free()
	if _, err := c.NewSequence(nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("new after close: %v", err)
	}
	if c.KeyPool(0) != nil || c.Lookup(seqTokens(9, 1)) != 0 {
		t.Fatal("pool or lookup after close")
	}
	if err := c.Scatter(nil, nil, 0, 0, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("scatter after close: %v", err)
	}
	_ = c.Stats()
}

func TestScatterFloat32(t *testing.T) {
	c := newTiny(t, 4)
	cfg := c.Config()
	// Batch 2 × steps 2, the second row padded.
	slots := []int64{5, 6, 9, -1}
	k := make([][]float32, cfg.Layers)
	v := make([][]float32, cfg.Layers)
	for l := range k {
		k[l] = make([]float32, 2*cfg.KVHeads*2*cfg.HeadDim)
		v[l] = make([]float32, len(k[l]))
		for i := range k[l] {
			k[l][i] = float32(l*1000 + i + 1)
			v[l][i] = -k[l][i]
		}
	}
	if err := c.Scatter(k, v, 2, 2, slots); err != nil {
		t.Fatal(err)
	}
	for l := range cfg.Layers {
		for b := range 2 {
			for st := range 2 {
				slot := slots[b*2+st]
				for h := range cfg.KVHeads {
					src := ((b*cfg.KVHeads+h)*2 + st) * cfg.HeadDim
					if slot < 0 {
						continue
					}
					off := c.SlotOffset(h, slot)
					if !slices.Equal(c.KeyPool(l)[off:off+cfg.HeadDim], k[l][src:src+cfg.HeadDim]) ||
						!slices.Equal(c.ValuePool(l)[off:off+cfg.HeadDim], v[l][src:src+cfg.HeadDim]) {
						t.Fatalf("layer %d row %d step %d head %d misplaced", l, b, st, h)
					}
				}
			}
		}
	}
	written := 0
	for _, x := range c.KeyPool(0) {
		if x != 0 {
			written++
		}
	}
	if written != 3*cfg.KVHeads*cfg.HeadDim {
		t.Fatalf("%d elements written, want %d (padding skipped)", written, 3*cfg.KVHeads*cfg.HeadDim)
	}
	bad := []struct {
		name  string
		k, v  [][]float32
		b, s  int
		slots []int64
	}{
		{"slots count", k, v, 2, 2, slots[:3]},
		{"layers", k[:1], v[:1], 2, 2, slots},
		{"row size", k, v, 1, 2, slots[:2]},
		{"slot range", k, v, 2, 2, []int64{0, 1, 16, 2}},
	}
	for _, tt := range bad {
		if err := c.Scatter(tt.k, tt.v, tt.b, tt.s, tt.slots); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	if err := c.ScatterLayer(1, k[1], v[1], 2, 2, slots); err != nil {
		t.Fatal(err)
	}
	if err := c.ScatterLayer(2, k[1], v[1], 2, 2, slots); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad layer: %v", err)
	}
}

// TestScatterFloat16: a float16 cache holds each written value rounded to
// the nearest float16 (pkg/f16's codec, ties to even) in the slot a float32
// cache would, skips padding, and takes half the memory per block.
func TestScatterFloat16(t *testing.T) {
	c := newTinyOf(t, 4, Float16)
	cfg := c.Config()
	f32 := tinyConfig(4)
	if 2*cfg.BlockBytes() != f32.BlockBytes() {
		t.Errorf("a float16 block is %d bytes, want half of float32's %d", cfg.BlockBytes(), f32.BlockBytes())
	}
	slots := []int64{5, 6, 9, -1}
	r := rand.New(rand.NewPCG(3, 3))
	k, v := make([][]float32, cfg.Layers), make([][]float32, cfg.Layers)
	for l := range k {
		k[l], v[l] = make([]float32, 2*cfg.KVHeads*2*cfg.HeadDim), make([]float32, 2*cfg.KVHeads*2*cfg.HeadDim)
		for i := range k[l] {
			k[l][i], v[l][i] = float32(r.NormFloat64()*100), float32(r.NormFloat64()*1e-5)
		}
	}
	if err := c.Scatter(k, v, 2, 2, slots); err != nil {
		t.Fatal(err)
	}
	written := 0
	for l := range cfg.Layers {
		kp, vp := c.KeyPoolFloat16(l), c.ValuePoolFloat16(l)
		if c.KeyPool(l) != nil || c.KeyPoolInt8(l) != nil || len(kp) == 0 {
			t.Fatal("a float16 cache's pools are float16 only")
		}
		for b := range 2 {
			for st := range 2 {
				slot := slots[b*2+st]
				if slot < 0 {
					continue
				}
				for h := range cfg.KVHeads {
					src := ((b*cfg.KVHeads+h)*2 + st) * cfg.HeadDim
					off := c.SlotOffset(h, slot)
					for e := range cfg.HeadDim {
						if kp[off+e] != f16.FromFloat32(k[l][src+e]) || vp[off+e] != f16.FromFloat32(v[l][src+e]) {
							t.Fatalf("layer %d row %d step %d head %d element %d: %#x, %#x; want %#x, %#x", l, b, st, h, e,
								kp[off+e], vp[off+e], f16.FromFloat32(k[l][src+e]), f16.FromFloat32(v[l][src+e]))
						}
					}
				}
			}
		}
		for _, x := range kp {
			if x != 0 {
				written++
			}
		}
	}
	if want := cfg.Layers * 3 * cfg.KVHeads * cfg.HeadDim; written != want {
		t.Errorf("%d keys written, want %d (padding skipped)", written, want)
	}
}

// TestInt8RoundTrip writes gaussian rows of growing magnitude token by
// token (so blocks get requantised) and checks what the graph would read
// back: every element within 1.5 steps of its block's final scale (see
// minScaleGrowth), and the relative RMS error small.
func TestInt8RoundTrip(t *testing.T) {
	cfg := Config{Layers: 2, KVHeads: 4, HeadDim: 64, BlockSize: 16, DType: Int8}
	cfg.BudgetBytes = 8 * cfg.BlockBytes()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := rand.New(rand.NewPCG(1, 2))
	const n = 100
	s, _ := c.NewSequence(seqTokens(n, 1))
	want := make([][][]float32, cfg.Layers) // [layer][token] row-major [heads*headDim]
	for l := range want {
		want[l] = make([][]float32, n)
	}
	for p := range n {
		k := make([][]float32, cfg.Layers)
		for l := range k {
			k[l] = make([]float32, cfg.KVHeads*cfg.HeadDim)
			mag := float32(0.5 + 3*r.Float64()) // rows vary: later ones often exceed the scale
			for i := range k[l] {
				k[l][i] = mag * float32(r.NormFloat64())
			}
			want[l][p] = k[l]
		}
		if err := s.Reserve(1); err != nil {
			t.Fatal(err)
		}
		slots, _ := s.Slots(nil, 1)
		if err := c.Scatter(k, k, 1, 1, slots); err != nil {
			t.Fatal(err)
		}
		s.MarkComputed(1)
	}
	var errSq, refSq float64
	row := make([]float32, cfg.HeadDim)
	for l := range cfg.Layers {
		for p := range n {
			slot := int64(s.blocks[p/16])*16 + int64(p%16)
			for h := range cfg.KVHeads {
				scale := c.KeyScales(l)[h*c.NumBlocks()+int(slot/16)]
				c.Dequantise(row, c.KeyPoolInt8(l), c.KeyScales(l), h, slot)
				for e, got := range row {
					x := want[l][p][h*cfg.HeadDim+e]
					if d := math.Abs(float64(got - x)); d > float64(scale)*1.5001 {
						t.Fatalf("layer %d pos %d head %d: %v read back as %v (scale %v)", l, p, h, x, got, scale)
					}
					if abs32(x) > scale*127*1.0001 {
						t.Fatalf("scale %v does not cover %v", scale, x)
					}
					errSq += float64((got - x) * (got - x))
					refSq += float64(x * x)
				}
			}
		}
	}
	rel := math.Sqrt(errSq / refSq)
	t.Logf("int8 relative RMS error %.4f", rel)
	if rel > 0.02 {
		t.Fatalf("relative RMS error %.4f > 2%%", rel)
	}
}

func TestQuantiseEdgeCases(t *testing.T) {
	cfg := Config{Layers: 1, KVHeads: 1, HeadDim: 4, BlockSize: 2, DType: Int8}
	cfg.BudgetBytes = 2 * cfg.BlockBytes()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pool, scales := c.KeyPoolInt8(0), c.KeyScales(0)
	c.quantiseRow(pool, scales, 0, 0, []float32{0, 0, 0, 0})
	if scales[0] != 0 || pool[0] != 0 {
		t.Fatal("zero row")
	}
	nan := float32(math.NaN())
	c.quantiseRow(pool, scales, 0, 1, []float32{nan, 1, float32(math.Inf(1)), -1})
	for _, q := range pool[:8] {
		if q < -127 {
			t.Fatalf("int8 %d out of range", q)
		}
	}
	if math.IsNaN(float64(scales[0])) || math.IsInf(float64(scales[0]), 0) {
		t.Fatalf("scale %v not finite", scales[0])
	}
}

func TestZeroAllocHotPaths(t *testing.T) {
	cfg := Config{Layers: 12, KVHeads: 4, HeadDim: 64, BlockSize: 16}
	cfg.BudgetBytes = 64 * cfg.BlockBytes()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var seqs []*Sequence
	for i := range 8 {
		s, _ := c.NewSequence(seqTokens(40, int32(i*100)))
		if err := s.Reserve(40); err != nil {
			t.Fatal(err)
		}
		s.MarkComputed(39)
		seqs = append(seqs, s)
	}
	tables := make([]int64, 8*4)
	lens := make([]int64, 8)
	slots := make([]int64, 0, 8)
	k := make([][]float32, 12)
	for l := range k {
		k[l] = make([]float32, 8*4*64)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := c.FillBlockTables(seqs, 4, tables, lens); err != nil {
			t.Fatal(err)
		}
		slots = slots[:0]
		for _, s := range seqs {
			slots, _ = s.Slots(slots, 1)
		}
		if err := c.Scatter(k, k, 8, 1, slots); err != nil {
			t.Fatal(err)
		}
		_ = c.CanFit(seqs, 1)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per step", allocs)
	}
	if lens[3] != 39 || tables[3*4+3] != padBlock {
		t.Fatalf("lens %v tables %v", lens, tables)
	}
	if err := c.FillBlockTables(seqs, 2, tables, lens); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("narrow table: %v", err)
	}
}

func TestWasteStats(t *testing.T) {
	c := newTiny(t, 16)
	s1, _ := c.NewSequence(seqTokens(5, 1))  // 2 blocks, 3 empty slots
	s2, _ := c.NewSequence(seqTokens(8, 50)) // 2 blocks, 0 empty
	compute(t, c, s1, 5)
	compute(t, c, s2, 8)
	st := c.Stats()
	if st.SlotsAllocated != 16 || st.SlotsFilled != 13 || math.Abs(st.Waste-3.0/16) > 1e-9 {
		t.Fatalf("waste stats %+v", st)
	}
	if st.PeakBlocksUsed != 4 || st.BytesUsed != 4*st.BlockBytes || st.Sequences != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestStatsConcurrent reads Stats from another goroutine while the owner
// works (run with -race).
func TestStatsConcurrent(t *testing.T) {
	c := newTiny(t, 16)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				if st := c.Stats(); st.BlocksUsed > st.BlocksTotal {
					t.Error("used > total")
				}
			}
		}
	})
	newOpsDriverCache(t, c, randomOps(7, 2000)).run()
	close(stop)
	wg.Wait()
}

// TestInt8ScaleResetOnReuse checks that a recycled block starts with fresh
// scales: a stale large scale would keep later small values coarse.
func TestInt8ScaleResetOnReuse(t *testing.T) {
	cfg := Config{Layers: 1, KVHeads: 1, HeadDim: 4, BlockSize: 4, DType: Int8}
	cfg.BudgetBytes = 1 * cfg.BlockBytes()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big, _ := c.NewSequence(seqTokens(1, 1))
	writeSteps(t, c, big, 1, 1000)
	big.Free()
	small, _ := c.NewSequence(seqTokens(1, 9))
	writeSteps(t, c, small, 1, 0.01)
	if got, want := c.KeyScales(0)[0], float32(0.01)/127; math.Abs(float64(got-want)) > 1e-9 {
		t.Fatalf("scale %v after reuse, want %v", got, want)
	}
}

// TestPrefault: with Prefault every page of the pools is resident as soon
// as New returns (mincore); lazily, none is until written.
func TestPrefault(t *testing.T) {
	for _, prefault := range []bool{false, true} {
		cfg := Config{Layers: 2, KVHeads: 2, HeadDim: 64, BlockSize: 16, Options: Options{Prefault: prefault}}
		cfg.BudgetBytes = 64 * cfg.BlockBytes() // 2 MiB
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		mem := c.mem.used
		vec := make([]byte, (len(mem)+os.Getpagesize()-1)/os.Getpagesize())
		if err := mincore(mem, vec); err != nil {
			c.Close()
			t.Skipf("mincore: %v", err)
		}
		resident := 0
		for _, v := range vec {
			resident += int(v & 1)
		}
		c.Close()
		t.Logf("prefault=%v: %d of %d pages resident", prefault, resident, len(vec))
		if prefault && resident != len(vec) {
			t.Errorf("prefaulted pool: %d of %d pages resident", resident, len(vec))
		}
		if !prefault && resident == len(vec) {
			t.Errorf("lazy pool: all %d pages resident before any write", len(vec))
		}
	}
}

// mincore reports which pages of b are resident (bit 0 of each vec byte).
func mincore(b, vec []byte) error {
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return e
	}
	return nil
}

// TestHugePages: by default the pools start on a 2 MiB boundary and, where
// the kernel offers transparent huge pages, a prefaulted pool is backed by
// them (AnonHugePages of its mapping in /proc/self/smaps); with
// DisableHugePages it is not advised and, unless the system forces huge
// pages on every mapping, has none.
func TestHugePages(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		t.Skipf("no transparent huge pages here (%q, %v)", strings.TrimSpace(string(mode)), err)
	}
	for _, disable := range []bool{false, true} {
		cfg := Config{Layers: 2, KVHeads: 2, HeadDim: 64, BlockSize: 16, Options: Options{Prefault: true, DisableHugePages: disable}}
		cfg.BudgetBytes = 256 * cfg.BlockBytes() // 8 MiB
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		used := c.mem.used
		start := uintptr(unsafe.Pointer(&used[0]))
		huge, err := anonHugeBytes(start, start+uintptr(len(used)))
		c.Close()
		if err != nil {
			t.Skipf("smaps: %v", err)
		}
		t.Logf("huge pages disabled=%v: %d KiB of %d KiB in huge pages (THP %s)", disable, huge>>10, len(used)>>10, strings.TrimSpace(string(mode)))
		switch {
		case !disable && start%hugePage != 0:
			t.Errorf("pools start at %#x, not on a 2 MiB boundary", start)
		case !disable && huge == 0:
			t.Errorf("advised pool has no huge pages")
		case disable && huge > 0 && !strings.Contains(string(mode), "[always]"):
			t.Errorf("pool mapped without the advice has %d bytes in huge pages", huge)
		}
	}
}

// anonHugeBytes sums AnonHugePages over the mappings of /proc/self/smaps
// that overlap [lo, hi).
func anonHugeBytes(lo, hi uintptr) (int64, error) {
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	var total int64
	in := false
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if a, b, ok := strings.Cut(f[0], "-"); ok && len(f) >= 5 {
			s, err1 := strconv.ParseUint(a, 16, 64)
			e, err2 := strconv.ParseUint(b, 16, 64)
			if err1 == nil && err2 == nil {
				in = uintptr(s) < hi && uintptr(e) > lo
				continue
			}
		}
		if in && f[0] == "AnonHugePages:" && len(f) >= 2 {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("smaps line %q: %w", line, err)
			}
			total += kb << 10
		}
	}
	return total, nil
}

// TestSequencesGrowInRuns: sequences admitted together and decoding
// together, a token each in turn, each keep their blocks in one run of
// addresses (the attention kernel reads a row's blocks where they lie;
// BenchmarkPagedAttentionLayout times runs against blocks taken in turn),
// where handing out the lowest free block had them take turns block by
// block.
func TestSequencesGrowInRuns(t *testing.T) {
	c := newPlacementCache(t, 128)
	seqs := admitSequences(t, c, 4, 8) // prompts of two blocks
	for step := range 24 {             // six blocks more each, a token at a time in turn
		for _, s := range seqs {
			if err := s.Append(int32(1000 + step)); err != nil {
				t.Fatal(err)
			}
			compute(t, c, s, 1)
		}
	}
	for i, s := range seqs {
		table := blockTableOf(t, s)
		for j := 1; j < len(table); j++ {
			if table[j] != table[j-1]+1 {
				t.Fatalf("sequence %d: blocks %v, not one run", i, table)
			}
		}
	}
	if err := c.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestFullCacheKeepsRuns: a server's cache fills with prefix entries and
// stays full, so from then on every block a sequence takes is an eviction.
// Rounds of eight sequences (a shared four-block system prompt, a prompt
// of their own, then decoding together a token each in turn) keep at
// least 90 % of their own blocks in address order (97–100 %), round after
// round, while every sequence after the first still finds the system
// prompt cached. Evicting strictly least recently used first left 0–8 % in
// order once the cache was full: blocks from all over the pool.
func TestFullCacheKeepsRuns(t *testing.T) {
	c := newTiny(t, 170)
	system := seqTokens(16, 7)
	for round := range 8 {
		var seqs []*Sequence
		for i := range 8 {
			p := append(slices.Clone(system), seqTokens(16, int32(10000*round+100*i))...)
			s, err := c.NewSequence(p)
			if err != nil {
				t.Fatal(err)
			}
			if want := 16; (round > 0 || i > 0) && s.Computed() != want {
				t.Fatalf("round %d sequence %d: %d tokens cached, want the system prompt's %d", round, i, s.Computed(), want)
			}
			compute(t, c, s, len(p)-s.Computed())
			seqs = append(seqs, s)
		}
		for step := range 24 { // six blocks more each
			for _, s := range seqs {
				if err := s.Append(int32(900 + step)); err != nil {
					t.Fatal(err)
				}
				compute(t, c, s, 1)
			}
		}
		inOrder, pairs := 0, 0
		for _, s := range seqs {
			table := blockTableOf(t, s)[4:] // the system prompt's blocks lie where its first sequence put them
			for j := 1; j < len(table); j++ {
				pairs++
				if table[j] == table[j-1]+1 {
					inOrder++
				}
			}
			s.Free()
		}
		if f := float64(inOrder) / float64(pairs); f < 0.9 {
			t.Errorf("round %d (%d evictions so far): %.2f of the blocks in address order, want ≥ 0.9", round, c.Stats().Evictions, f)
		}
		if err := c.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	if c.Stats().Evictions == 0 {
		t.Fatal("the cache never filled: no evictions")
	}
}

// TestRunSearchLooksAgain: a search for a run that found none is not
// repeated until blocks are freed or cached (taking blocks only removes
// runs), and is repeated then.
func TestRunSearchLooksAgain(t *testing.T) {
	var bt blockTable
	bt.init(64, 4)
	for b := range int32(64) { // every block in use
		bt.take(b)
		bt.ref[b] = 1
	}
	release := func(b int32) { bt.ref[b] = 0; bt.setFree(b) }
	release(5)
	if b, inRun := bt.placeFree(none); b != 5 || inRun {
		t.Fatalf("one free block: placeFree %d %v, want 5 false", b, inRun)
	}
	for b := int32(40); b < 64; b++ {
		release(b)
	}
	if b, inRun := bt.placeFree(none); b != 40+runGap || !inRun {
		t.Fatalf("24 blocks freed after a sequence's: placeFree %d %v, want %d true", b, inRun, 40+runGap)
	}

	var lru blockTable
	lru.init(64, 4)
	for b := range int32(64) {
		lru.take(b)
		lru.ref[b] = 1
	}
	cache := func(b int32) { lru.ref[b] = 0; lru.lruPush(b) }
	cache(30)
	if b := lru.placeStale(none); b != none {
		t.Fatalf("one cached block: placeStale %d, want none", b)
	}
	for b := int32(25); b >= 10; b-- { // a sequence's blocks, last first
		cache(b)
	}
	// 17 blocks in the LRU; the 9 pushed first are stale: 30 and 25 down to 18
	if b := lru.placeStale(none); b != 18 {
		t.Fatalf("a released sequence's blocks: placeStale %d, want 18", b)
	}
}

// TestLowestFreeBlockFirst: in a cache too full for runs, blocks are
// handed out lowest id first, so a sequence admitted after others
// finished in any order gets the cache's lowest free blocks in address
// order (in-order blocks read faster than scattered).
func TestLowestFreeBlockFirst(t *testing.T) {
	c := newPlacementCache(t, 12)
	seqs := admitSequences(t, c, 4, 12) // four sequences of 3 blocks: 0-2, 3-5, 6-8, 9-11
	seqs[1].Free()                      // 3-5, then 9-11: a LIFO list would hand out 9, 10, 11, 3, 4
	seqs[3].Free()
	s, _ := c.NewSequence(seqTokens(20, 900))
	compute(t, c, s, 20) // 5 blocks
	table := blockTableOf(t, s)
	if want := []int64{3, 4, 5, 9, 10}; !slices.Equal(table, want) {
		t.Fatalf("blocks %v, want %v (lowest free first)", table, want)
	}
	if err := c.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// newPlacementCache is a float32 cache of n tiny blocks without a prefix
// cache, closed with the test.
func newPlacementCache(t *testing.T, blocks int) *Cache {
	t.Helper()
	cfg := tinyConfig(blocks)
	cfg.DisablePrefixCache = true
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// admitSequences computes the prompts of n sequences of tokens tokens in
// turn (distinct tokens each).
func admitSequences(t *testing.T, c *Cache, n, tokens int) []*Sequence {
	t.Helper()
	var seqs []*Sequence
	for i := range n {
		s, err := c.NewSequence(seqTokens(tokens, int32(100*i)))
		if err != nil {
			t.Fatal(err)
		}
		compute(t, c, s, tokens)
		seqs = append(seqs, s)
	}
	return seqs
}

// blockTableOf is s's block table.
func blockTableOf(t *testing.T, s *Sequence) []int64 {
	t.Helper()
	table, err := s.BlockTable(nil, s.NumBlocks())
	if err != nil {
		t.Fatal(err)
	}
	return table
}
