package kvcache

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// opsDriver applies a byte-coded sequence of operations to a small cache
// and checks the invariants and the pool contents after each one. The pool
// content of a computed position is a function of the whole token prefix
// up to it (as real keys and values are), so prefix sharing, copy-on-write
// and eviction mistakes show up as wrong values.
type opsDriver struct {
	t    testing.TB
	c    *Cache
	data []byte
	seqs []*Sequence
	// scratch
	slots        []int64
	keys, values [][]float32
	tables, lens []int64
}

var opTemplates = [3][]int32{
	{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
	{1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 22, 23, 24, 25, 26, 27},
	{30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45},
}

func newOpsDriver(t testing.TB, prefix bool, data []byte) *opsDriver {
	return newOpsDriverType(t, Float32, prefix, data)
}

func newOpsDriverType(t testing.TB, dt DType, prefix bool, data []byte) *opsDriver {
	cfg := Config{Layers: 2, KVHeads: 2, HeadDim: 2, DType: dt, BlockSize: 4, Options: Options{DisablePrefixCache: !prefix}}
	cfg.BudgetBytes = 24 * cfg.BlockBytes()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return newOpsDriverCache(t, c, data)
}

func newOpsDriverCache(t testing.TB, c *Cache, data []byte) *opsDriver {
	return &opsDriver{t: t, c: c, data: data}
}

func (d *opsDriver) next() (byte, bool) {
	if len(d.data) == 0 {
		return 0, false
	}
	b := d.data[0]
	d.data = d.data[1:]
	return b, true
}

func (d *opsDriver) pick() *Sequence {
	if len(d.seqs) == 0 {
		return nil
	}
	b, _ := d.next()
	return d.seqs[int(b)%len(d.seqs)]
}

func (d *opsDriver) run() {
	for {
		op, ok := d.next()
		if !ok {
			break
		}
		d.apply(op % 9)
		if err := d.c.checkInvariants(); err != nil {
			d.t.Fatalf("after op %d: %v", op%9, err)
		}
		d.checkContents()
	}
	for _, s := range d.seqs {
		s.Free()
	}
	d.seqs = nil
	if err := d.c.checkInvariants(); err != nil {
		d.t.Fatalf("after freeing all: %v", err)
	}
	if st := d.c.Stats(); st.BlocksUsed != 0 || st.SlotsFilled != 0 || st.BlocksFree+st.BlocksCached != st.BlocksTotal {
		d.t.Fatalf("leak after freeing all: %+v", st)
	}
}

// Caps that keep one run linear in its input: the cache has 24 blocks, so
// more sequences or longer ones only repeat the out-of-blocks path.
const (
	maxOpsSeqs   = 24
	maxOpsTokens = 96
)

func (d *opsDriver) apply(op byte) {
	c := d.c
	if (op <= 1 || op == 5 || op == 8) && len(d.seqs) >= maxOpsSeqs {
		op = 6 // free one instead of growing the population
	}
	switch op {
	case 0, 1: // create
		a, _ := d.next()
		b, _ := d.next()
		prompt := append([]int32(nil), opTemplates[int(a)%3][:int(b)%17]...)
		for range int(a>>2) % 6 {
			x, _ := d.next()
			prompt = append(prompt, int32(x%4))
		}
		s, err := c.NewSequence(prompt)
		if err != nil {
			d.t.Fatal(err)
		}
		if s.Computed()%c.BlockSize() != 0 || (len(prompt) > 0 && s.Computed() > len(prompt)-1) {
			d.t.Fatalf("prompt %v: %d computed", prompt, s.Computed())
		}
		d.seqs = append(d.seqs, s)
	case 2, 3: // step over a random subset
		d.step()
	case 4: // append
		if s := d.pick(); s != nil && s.Len() < maxOpsTokens {
			x, _ := d.next()
			if err := s.Append(int32(x % 4)); err != nil {
				d.t.Fatal(err)
			}
		}
	case 5: // fork
		if s := d.pick(); s != nil {
			f, err := s.Fork()
			if err != nil {
				d.t.Fatal(err)
			}
			d.seqs = append(d.seqs, f)
		}
	case 6: // free
		if s := d.pick(); s != nil {
			s.Free()
			for i, x := range d.seqs {
				if x == s {
					d.seqs = append(d.seqs[:i], d.seqs[i+1:]...)
					break
				}
			}
			if err := s.Append(1); !errors.Is(err, ErrSequenceFreed) {
				d.t.Fatalf("append to freed sequence: %v", err)
			}
		}
	case 7: // preempt, or resume a preempted one
		if s := d.pick(); s != nil {
			if s.NumBlocks() == 0 {
				if _, err := s.Resume(); err != nil {
					d.t.Fatal(err)
				}
			} else if err := s.Preempt(); err != nil {
				d.t.Fatal(err)
			}
		}
	case 8: // prefix lookup probe, then admission of the whole prompt
		a, _ := d.next()
		p := opTemplates[int(a)%3][:int(a>>2)%17]
		n := c.Lookup(p)
		if n%c.BlockSize() != 0 || n > max(len(p)-1, 0) {
			d.t.Fatalf("lookup %v = %d", p, n)
		}
		cost, free := c.AdmitBlocks(p), c.FreeBlocks()
		if cost > free {
			return
		}
		s, _ := c.NewSequence(p)
		if s.Computed() != n {
			d.t.Fatalf("lookup said %d, attach got %d", n, s.Computed())
		}
		if err := s.Reserve(s.Len() - s.Computed()); err != nil {
			d.t.Fatalf("AdmitBlocks %d of %d free, but: %v", cost, free, err)
		}
		if drop := free - c.FreeBlocks(); drop != cost {
			d.t.Fatalf("AdmitBlocks %d, free blocks dropped by %d", cost, drop)
		}
		d.seqs = append(d.seqs, s)
	}
}

// step runs one fake model step: reserve, slots, scatter, mark computed.
func (d *opsDriver) step() {
	c := d.c
	var batch []*Sequence
	var ns []int
	for _, s := range d.seqs {
		x, _ := d.next()
		pending := s.Len() - s.Computed()
		if x%2 == 0 || pending == 0 {
			continue
		}
		n := min(pending, 1+int(x>>1)%6)
		fits := c.CanFit([]*Sequence{s}, n)
		err := s.Reserve(n)
		if fits != (err == nil) {
			d.t.Fatalf("CanFit %v but Reserve: %v", fits, err)
		}
		if err != nil {
			var oob *OutOfBlocksError
			if !errors.Is(err, ErrOutOfBlocks) || !errors.As(err, &oob) || oob.Needed <= oob.Free {
				d.t.Fatalf("reserve: %v", err)
			}
			continue
		}
		batch = append(batch, s)
		ns = append(ns, n)
	}
	if len(batch) == 0 {
		return
	}
	steps := 0
	for _, n := range ns {
		steps = max(steps, n)
	}
	cfg := c.Config()
	d.slots = d.slots[:0]
	for i, s := range batch {
		var err error
		if d.slots, err = s.Slots(d.slots, ns[i]); err != nil {
			d.t.Fatal(err)
		}
		for range steps - ns[i] {
			d.slots = append(d.slots, -1)
		}
	}
	size := len(batch) * cfg.KVHeads * steps * cfg.HeadDim
	d.keys, d.values = make([][]float32, cfg.Layers), make([][]float32, cfg.Layers)
	for l := range cfg.Layers {
		d.keys[l], d.values[l] = make([]float32, size), make([]float32, size)
		for b, s := range batch {
			for t := range ns[b] {
				f := prefixValue(s.Tokens()[:s.Computed()+t+1])
				for h := range cfg.KVHeads {
					for e := range cfg.HeadDim {
						i := ((b*cfg.KVHeads+h)*steps+t)*cfg.HeadDim + e
						d.keys[l][i] = keyValue(f, l, h)
						d.values[l][i] = keyValue(f, l, h) + 1
					}
				}
			}
		}
	}
	if err := c.Scatter(d.keys, d.values, len(batch), steps, d.slots); err != nil {
		d.t.Fatal(err)
	}
	for i, s := range batch {
		if err := s.MarkComputed(ns[i]); err != nil {
			d.t.Fatal(err)
		}
	}
	w := MaxBlocks(batch)
	d.tables = make([]int64, len(batch)*w)
	d.lens = make([]int64, len(batch))
	if err := c.FillBlockTables(batch, w, d.tables, d.lens); err != nil {
		d.t.Fatal(err)
	}
	for i, s := range batch {
		if d.lens[i] != int64(s.Computed()) {
			d.t.Fatalf("context len %d, computed %d", d.lens[i], s.Computed())
		}
		for j := s.NumBlocks(); j < w; j++ {
			if b := d.tables[i*w+j]; b < 0 || b >= int64(c.NumBlocks()) {
				d.t.Fatalf("padding block id %d invalid", b)
			}
		}
	}
}

// checkContents verifies that every computed position of every live
// sequence holds the keys and values of its own token prefix (for int8,
// within the 1.5 scale steps quantisation allows).
func (d *opsDriver) checkContents() {
	c := d.c
	cfg := c.Config()
	row := make([]float32, cfg.HeadDim)
	for _, s := range d.seqs {
		h := prefixSeed
		for p := range s.Computed() {
			h = prefixStep(h, s.Tokens()[p])
			f := h & prefixMask
			slot := int64(s.blocks[p/c.bs])*int64(c.bs) + int64(p%c.bs)
			for l := range cfg.Layers {
				for h := range cfg.KVHeads {
					var k, v, tol float32
					if cfg.DType == Int8 {
						c.Dequantise(row, c.KeyPoolInt8(l), c.KeyScales(l), h, slot)
						k = row[0]
						c.Dequantise(row, c.ValuePoolInt8(l), c.ValueScales(l), h, slot)
						v = row[0]
						si := h*c.NumBlocks() + int(slot)/c.bs
						tol = 1.5001 * max(c.KeyScales(l)[si], c.ValueScales(l)[si])
					} else {
						off := c.SlotOffset(h, slot)
						k, v = c.KeyPool(l)[off], c.ValuePool(l)[off]
					}
					if abs32(k-keyValue(f, l, h)) > tol || abs32(v-keyValue(f, l, h)-1) > tol {
						d.t.Fatalf("seq %d pos %d layer %d head %d: key %v value %v, want %v", s.ID(), p, l, h, k, v, keyValue(f, l, h))
					}
				}
			}
		}
	}
}

// prefixValue is a stand-in for attention state: it depends on every token
// up to the position, and is exact in float32.
func prefixValue(toks []int32) uint32 {
	h := prefixSeed
	for _, t := range toks {
		h = prefixStep(h, t)
	}
	return h & prefixMask
}

const (
	prefixSeed = uint32(2166136261)
	prefixMask = 0x3ffff
)

func prefixStep(h uint32, t int32) uint32 { return (h ^ uint32(t)) * 16777619 }

func keyValue(f uint32, l, h int) float32 { return float32(f*16 + uint32(l*4+h*2)) }

func randomOps(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x6b76))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestRandomOps(t *testing.T) {
	seeds, length := 16, 2000
	if testing.Short() {
		seeds, length = 4, 1000
	}
	for seed := range seeds {
		for _, prefix := range []bool{true, false} {
			newOpsDriver(t, prefix, randomOps(uint64(seed), length)).run()
		}
		newOpsDriverType(t, Int8, true, randomOps(uint64(seed), length)).run()
	}
}

func FuzzOps(f *testing.F) {
	for seed := range 6 {
		f.Add(randomOps(uint64(100+seed), 600))
	}
	f.Add([]byte{0, 0, 20, 2, 1, 2, 3, 5, 0, 2, 1, 1, 6, 0, 7, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 2000 { // longer inputs find nothing new, only run slower
			data = data[:2000]
		}
		newOpsDriver(t, true, data).run()
	})
}
