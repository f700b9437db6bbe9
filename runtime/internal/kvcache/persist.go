package kvcache

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Persisting the prefix cache. A device restarts (power cuts, updates,
// watchdogs), and a kiosk's long system prompt would be prefilled again
// after every one. Snapshot copies the prefix cache's hottest chains (full,
// computed blocks with their tokens and chain hashes) out of the pools,
// SnapshotReused only those a later sequence reused (what saves while
// serving keep);
// WriteFile stores them in one file, atomically; OpenPersisted reads the
// file's index at the next start, and UsePersisted lets a new sequence
// restore a block from the file the first time a prompt asks for it, so a
// start reads only the index.
//
// File layout (little-endian):
//
//	header   "EIKVPC01", u32 key length, key, u32 layers, kv heads,
//	         head dim, block size, dtype, u64 blocks
//	index    per block: u64 hash, u64 parent hash, block size × u32 token
//	u32      CRC-32C of header and index
//	records  per block: its data (see blockBytes), u32 CRC-32C of the
//	         data and the block's hash
//
// A file written for another key (the caller's: the model's digest) or
// another geometry or element type is stale and ignored (ErrStale); a torn
// or corrupt one fails its size, CRC or chain-hash checks (ErrCorrupt); a
// record whose CRC fails when it is read is never served.

var (
	// ErrStale reports a persisted prefix cache written for another model
	// or KV format: ignore it (the next save replaces it).
	ErrStale = errors.New("kvcache: persisted prefix cache is for another model or format")
	// ErrCorrupt reports a persisted prefix cache that fails its checks
	// (torn, truncated or altered): ignore it.
	ErrCorrupt = errors.New("kvcache: persisted prefix cache is corrupt")
)

const persistMagic = "EIKVPC01"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot is a copy of the prefix cache's hottest chains, taken on the
// owner goroutine and written by any.
type Snapshot struct {
	cfg     Config
	hashes  []uint64
	parents []uint64
	tokens  []int32 // BlockSize per block
	data    []byte  // blockBytes per block, or nil when read from live

	// live and ids: a snapshot taken in place (SnapshotInPlace) reads the
	// blocks from the pools as it writes them.
	live *Cache
	ids  []int32

	// Blocks of the file the cache restores from that it has not restored
	// (indices into from): WriteFile copies them over, so a save does not
	// forget what the previous run persisted and this one never asked for.
	from  *Persisted
	carry []int
}

// Blocks is how many blocks the snapshot holds.
func (s *Snapshot) Blocks() int { return len(s.hashes) + len(s.carry) }

// PrefixVersion counts the blocks entered into the prefix cache: 0 means
// there is nothing a save at Close could add.
func (c *Cache) PrefixVersion() uint64 { return c.prefixVersion }

// ReusedVersion counts the blocks a later sequence took from the prefix
// cache (or from the persisted file) for the first time: what
// SnapshotReused would take has changed only when it has.
func (c *Cache) ReusedVersion() uint64 { return c.reusedVersion }

// persistedBytes is what one block takes in the file.
func (c Config) persistedBytes() int64 {
	return c.BlockBytes() + 4 + 16 + 4*int64(c.BlockSize)
}

// Snapshot copies the cached prefix chains that fit in maxBytes of file:
// first those of running sequences, then the unreferenced ones from the
// most recently used, each with every block before it in its chain (a
// block is only found through its ancestors). It must be called on the
// owner goroutine; it costs a copy of the blocks it takes.
func (c *Cache) Snapshot(maxBytes int64) *Snapshot {
	return c.copyOut(c.choose(maxBytes, false))
}

// SnapshotReused is Snapshot of the chains a later sequence has reused
// (a system prompt, a conversation's earlier turns): what a save while
// serving keeps. A prompt computed once and never asked for again is left
// to the save at a clean stop, so a device whose prompts do not repeat
// neither copies nor rewrites up to maxBytes at every save (the soak in
// update/testdata/soak.sh measures the agent's heap and writes).
func (c *Cache) SnapshotReused(maxBytes int64) *Snapshot {
	return c.copyOut(c.choose(maxBytes, true))
}

// copyOut copies the blocks s chose out of the pools.
func (c *Cache) copyOut(s *Snapshot) *Snapshot {
	rec := int(c.cfg.BlockBytes())
	s.data = make([]byte, len(s.ids)*rec)
	for i, b := range s.ids {
		c.readBlock(s.data[i*rec:(i+1)*rec], b)
	}
	s.ids = nil
	return s
}

// SnapshotInPlace is Snapshot without the copy: its WriteFile reads the
// blocks from the pools, so it must run on the owner goroutine before the
// cache changes again (a decoder's last save at Close, which then holds no
// second copy of up to maxBytes in memory).
func (c *Cache) SnapshotInPlace(maxBytes int64) *Snapshot {
	s := c.choose(maxBytes, false)
	s.live = c
	return s
}

// choose picks Snapshot's blocks (ids), only reused ones if reusedOnly,
// and the file blocks to carry. (A reused block's ancestors are reused
// too: a sequence takes a prompt's cached blocks from the root.)
func (c *Cache) choose(maxBytes int64, reusedOnly bool) *Snapshot {
	s := &Snapshot{cfg: c.cfg, from: c.persisted}
	if c.closed || c.cfg.DisablePrefixCache {
		return s
	}
	limit := int(maxBytes / c.cfg.persistedBytes())
	chosen := map[uint64]bool{}
	var order []int32
	take := func(b int32) {
		if reusedOnly && !c.prefix.reused[b] {
			return
		}
		var chain []int32
		for x := b; ; {
			if chosen[c.prefix.hash[x]] {
				break
			}
			chain = append(chain, x)
			p := c.prefix.parent[x]
			if p == rootHash {
				break
			}
			y, ok := c.prefix.byHash[p]
			if !ok {
				return // its parent was evicted: unreachable from the root
			}
			x = y
		}
		if len(order)+len(chain) > limit {
			return
		}
		for _, x := range slices.Backward(chain) {
			chosen[c.prefix.hash[x]] = true
			order = append(order, x)
		}
	}
	for b := range int32(c.numBlocks) {
		if c.blocks.ref[b] > 0 && c.prefix.hashed[b] {
			take(b)
		}
	}
	for b := c.blocks.tail; b != none; b = c.blocks.prev[b] {
		take(b)
	}
	s.ids = order
	for _, b := range order {
		s.hashes = append(s.hashes, c.prefix.hash[b])
		s.parents = append(s.parents, c.prefix.parent[b])
		s.tokens = append(s.tokens, c.prefix.blockTokens(b)...)
	}
	if p := c.persisted; p != nil {
		for j := range p.hashes {
			h, parent := p.hashes[j], p.parents[j]
			if len(order)+len(s.carry) >= limit || chosen[h] || p.bad[j] || (parent != rootHash && !chosen[parent]) {
				continue
			}
			chosen[h] = true
			s.carry = append(s.carry, j)
		}
	}
	return s
}

// WriteFile writes the snapshot to path under key, atomically: a temporary
// file, synced, renamed over path, the directory synced. A crash leaves the
// old file or the new, never a mix. It returns the bytes written.
func (s *Snapshot) WriteFile(path string, key []byte) (int64, error) {
	cfg := s.cfg
	rec := int(cfg.BlockBytes())
	own := len(s.hashes) // blocks from the cache; the carried ones follow
	hashes, parents, tokens := s.hashes, s.parents, s.tokens
	var carried []byte
	if len(s.carry) > 0 {
		hashes, parents, tokens = slices.Clone(hashes), slices.Clone(parents), slices.Clone(tokens)
		buf := make([]byte, rec+4)
		for _, j := range s.carry {
			data, err := s.from.read(j, buf)
			if err != nil {
				continue // never copy a record that fails its check
			}
			hashes = append(hashes, s.from.hashes[j])
			parents = append(parents, s.from.parents[j])
			tokens = append(tokens, s.from.blockTokens(j)...)
			carried = append(carried, data...)
		}
	}
	var block []byte // a live snapshot's block being written
	if s.live != nil {
		block = make([]byte, rec)
	}
	blockData := func(i int) []byte {
		switch {
		case i >= own:
			return carried[(i-own)*rec : (i-own+1)*rec]
		case s.live != nil:
			s.live.readBlock(block, s.ids[i])
			return block
		}
		return s.data[i*rec : (i+1)*rec]
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return 0, fmt.Errorf("kvcache: persist: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return 0, fmt.Errorf("kvcache: persist: %w", err)
	}
	w := &crcWriter{w: bufio.NewWriterSize(f, 1<<20)}
	w.bytes([]byte(persistMagic))
	w.u32(uint32(len(key)))
	w.bytes(key)
	for _, v := range []int{cfg.Layers, cfg.KVHeads, cfg.HeadDim, cfg.BlockSize, int(cfg.DType)} {
		w.u32(uint32(v))
	}
	w.u64(uint64(len(hashes)))
	for i := range hashes {
		w.u64(hashes[i])
		w.u64(parents[i])
		for _, t := range tokens[i*cfg.BlockSize : (i+1)*cfg.BlockSize] {
			w.u32(uint32(t))
		}
	}
	w.u32(w.crc)
	for i := range hashes {
		d := blockData(i)
		w.bytes(d)
		w.u32(recordCRC(d, hashes[i]))
	}
	err = w.err
	if err == nil {
		err = w.w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return 0, fmt.Errorf("kvcache: persist %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return w.n, nil
}

func recordCRC(data []byte, hash uint64) uint32 {
	var h [8]byte
	binary.LittleEndian.PutUint64(h[:], hash)
	return crc32.Update(crc32.Update(0, castagnoli, data), castagnoli, h[:])
}

// crcWriter writes little-endian fields, keeping a running CRC-32C and
// the first error.
type crcWriter struct {
	w       *bufio.Writer
	crc     uint32
	n       int64
	err     error
	scratch [8]byte // a field's bytes: no allocation per token of the index
}

func (w *crcWriter) bytes(b []byte) {
	if w.err != nil {
		return
	}
	w.crc = crc32.Update(w.crc, castagnoli, b)
	var n int
	n, w.err = w.w.Write(b)
	w.n += int64(n)
}

func (w *crcWriter) u32(v uint32) { w.bytes(binary.LittleEndian.AppendUint32(w.scratch[:0], v)) }
func (w *crcWriter) u64(v uint64) { w.bytes(binary.LittleEndian.AppendUint64(w.scratch[:0], v)) }

// Persisted is an open persisted prefix cache: its index in memory, its
// records read on demand.
type Persisted struct {
	f       *os.File
	bs      int
	rec     int64
	dataOff int64
	hashes  []uint64
	parents []uint64
	tokens  []int32
	byHash  map[uint64]int
	bad     []bool // records that failed their check: never served
	buf     []byte // the owner goroutine's record buffer (restore)
}

// maxPersistKey bounds the key read from a file before it is compared.
const maxPersistKey = 4096

// OpenPersisted opens the persisted prefix cache at path if it was written
// for key and a cache of cfg's geometry and element type. Its index is
// checked whole (size, CRC, every chain hash recomputed from its tokens);
// records are checked as they are read. A missing file is an
// fs.ErrNotExist error; a file for another model or format ErrStale; a
// damaged one ErrCorrupt.
func OpenPersisted(path string, key []byte, cfg Config) (*Persisted, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	p, err := readIndex(f, key, cfg)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return p, nil
}

func readIndex(f *os.File, key []byte, cfg Config) (*Persisted, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	r := &crcReader{r: bufio.NewReader(io.LimitReader(f, st.Size()))}
	magic := r.bytes(len(persistMagic))
	if r.err != nil || string(magic) != persistMagic {
		return nil, fmt.Errorf("%w: not a persisted prefix cache", ErrCorrupt)
	}
	kl := r.u32()
	if kl > maxPersistKey {
		return nil, fmt.Errorf("%w: key of %d bytes", ErrCorrupt, kl)
	}
	fileKey := r.bytes(int(kl))
	var geom [5]uint32
	for i := range geom {
		geom[i] = r.u32()
	}
	n := r.u64()
	if r.err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorrupt, r.err)
	}
	if string(fileKey) != string(key) {
		return nil, fmt.Errorf("%w: written for another model version", ErrStale)
	}
	want := [5]uint32{uint32(cfg.Layers), uint32(cfg.KVHeads), uint32(cfg.HeadDim), uint32(cfg.BlockSize), uint32(cfg.DType)}
	if geom != want {
		return nil, fmt.Errorf("%w: geometry %v, this cache is %v (layers, kv heads, head dim, block size, dtype)", ErrStale, geom, want)
	}
	bs, rec := cfg.BlockSize, cfg.BlockBytes()
	headLen := int64(len(persistMagic)) + 4 + int64(kl) + 5*4 + 8
	entry := 16 + 4*int64(bs)
	if n > uint64(st.Size()) || headLen+int64(n)*(entry+rec+4)+4 != st.Size() {
		return nil, fmt.Errorf("%w: %d blocks do not match the file's %d bytes (torn or truncated)", ErrCorrupt, n, st.Size())
	}
	p := &Persisted{f: f, bs: bs, rec: rec, dataOff: headLen + int64(n)*entry + 4, byHash: make(map[uint64]int, n),
		hashes: make([]uint64, n), parents: make([]uint64, n), tokens: make([]int32, int(n)*bs), bad: make([]bool, n), buf: make([]byte, rec+4)}
	for i := range int(n) {
		p.hashes[i], p.parents[i] = r.u64(), r.u64()
		for k := range bs {
			p.tokens[i*bs+k] = int32(r.u32())
		}
	}
	sum := r.crc
	if got := r.u32(); r.err != nil || got != sum {
		return nil, fmt.Errorf("%w: index checksum", ErrCorrupt)
	}
	for i := range int(n) {
		if chainHash(p.parents[i], p.blockTokens(i)) != p.hashes[i] {
			return nil, fmt.Errorf("%w: block %d's hash does not match its tokens", ErrCorrupt, i)
		}
		p.byHash[p.hashes[i]] = i
	}
	return p, nil
}

// crcReader reads little-endian fields, keeping a running CRC-32C and the
// first error.
type crcReader struct {
	r   *bufio.Reader
	crc uint32
	err error
}

func (r *crcReader) bytes(n int) []byte {
	b := make([]byte, n)
	if r.err != nil {
		return b
	}
	_, r.err = io.ReadFull(r.r, b)
	r.crc = crc32.Update(r.crc, castagnoli, b)
	return b
}

func (r *crcReader) u32() uint32 { return binary.LittleEndian.Uint32(r.bytes(4)) }
func (r *crcReader) u64() uint64 { return binary.LittleEndian.Uint64(r.bytes(8)) }

// Blocks is how many blocks the file holds.
func (p *Persisted) Blocks() int { return len(p.hashes) }

// Close closes the file.
func (p *Persisted) Close() error { return p.f.Close() }

func (p *Persisted) blockTokens(i int) []int32 { return p.tokens[i*p.bs : (i+1)*p.bs] }

// find returns the record of the block named h holding toks after parent.
func (p *Persisted) find(parent, h uint64, toks []int32) (int, bool) {
	i, ok := p.byHash[h]
	if !ok || p.bad[i] || p.parents[i] != parent || !slices.Equal(p.blockTokens(i), toks) {
		return 0, false
	}
	return i, true
}

// read reads record i into buf (blockBytes+4: the data and its CRC),
// checks it and returns the data. Reads with separate buffers may run at
// once (pread): WriteFile's carry-over beside the owner's restores.
func (p *Persisted) read(i int, buf []byte) ([]byte, error) {
	if _, err := p.f.ReadAt(buf, p.dataOff+int64(i)*(p.rec+4)); err != nil {
		return nil, fmt.Errorf("%w: block %d: %v", ErrCorrupt, i, err)
	}
	if binary.LittleEndian.Uint32(buf[p.rec:]) != recordCRC(buf[:p.rec], p.hashes[i]) {
		return nil, fmt.Errorf("%w: block %d fails its checksum", ErrCorrupt, i)
	}
	return buf[:p.rec], nil
}

// UsePersisted makes the cache restore prefix blocks from p as prompts ask
// for them (the cache closes p when it is replaced or the cache closes).
// Owner goroutine only.
func (c *Cache) UsePersisted(p *Persisted) {
	if c.persisted != nil && c.persisted != p {
		c.persisted.Close()
	}
	c.persisted = p
}

// restore brings the block named h (holding toks after parent) from the
// persisted file into a newly allocated block (placed as allocBlock places
// the block after the sequence's block after), entered in the prefix index
// and referenced once, or reports false: not in the file, no block free,
// or a record that fails its check.
func (c *Cache) restore(after int32, parent, h uint64, toks []int32) (int32, bool) {
	p := c.persisted
	if p == nil || c.blocks.available() == 0 {
		return none, false
	}
	i, ok := p.find(parent, h, toks)
	if !ok {
		return none, false
	}
	data, err := p.read(i, p.buf)
	if err != nil {
		p.bad[i] = true // never read again
		c.stats.restoreFailures.Add(1)
		return none, false
	}
	b := c.allocBlock(after)
	c.writeBlock(b, data)
	c.grow(b, c.bs)
	c.addPrefix(b, parent, h, toks)
	c.stats.restored.Add(1)
	return b, true
}

// persistedHas reports whether the file can restore the block named h.
func (c *Cache) persistedHas(parent, h uint64, toks []int32) bool {
	if c.persisted == nil {
		return false
	}
	_, ok := c.persisted.find(parent, h, toks)
	return ok
}

// readBlock copies block b's keys, values and (int8) scales to dst,
// blockBytes long: per layer the keys head by head then the values, each
// head BlockSize×HeadDim elements; then per layer the key scales and the
// value scales, one float32 per head.
func (c *Cache) readBlock(dst []byte, b int32) { c.copyBlockBytes(b, dst, false) }

// writeBlock is readBlock's inverse.
func (c *Cache) writeBlock(b int32, src []byte) { c.copyBlockBytes(b, src, true) }

// copyBlockBytes copies block b between the pools and buf (readBlock's
// layout): into the pools when toPools, else out of them.
func (c *Cache) copyBlockBytes(b int32, buf []byte, toPools bool) {
	esize := c.cfg.DType.Size()
	n := c.blockElems * esize
	off := 0
	for l := range c.cfg.Layers {
		for _, pool := range [2][]byte{c.mem.keyBytes[l], c.mem.valueBytes[l]} {
			for h := range c.cfg.KVHeads {
				region := pool[h*c.headStride*esize+int(b)*n:][:n]
				if toPools {
					copy(region, buf[off:off+n])
				} else {
					copy(buf[off:off+n], region)
				}
				off += n
			}
		}
	}
	if c.cfg.DType != Int8 {
		return
	}
	for l := range c.cfg.Layers {
		for _, sc := range [2][]float32{c.mem.keyScale[l], c.mem.valueScale[l]} {
			for h := range c.cfg.KVHeads {
				i := h*c.numBlocks + int(b)
				if toPools {
					sc[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[off:]))
				} else {
					binary.LittleEndian.PutUint32(buf[off:], math.Float32bits(sc[i]))
				}
				off += 4
			}
		}
	}
}

// PrefaultRestore commits the pool memory of the lowest n blocks, those a
// restore from the persisted file takes first (a new cache's first
// sequence starts at block 0 and runs on), so that the first prompt after
// a start does not pay the page faults: with transparent huge pages a
// block touches one 2 MiB page per (layer, K/V, head) region, and
// restoring a long prefix faults in hundreds of them inside that prompt's
// admission. Call it on a new cache before any use (the fallback touch
// writes zeros).
func (c *Cache) PrefaultRestore(n int) {
	n = min(n, c.numBlocks)
	if n <= 0 || c.closed {
		return
	}
	esize := c.cfg.DType.Size()
	page := os.Getpagesize()
	span := n * c.blockElems * esize
	for l := range c.cfg.Layers {
		for _, pool := range [2][]byte{c.mem.keyBytes[l], c.mem.valueBytes[l]} {
			for h := range c.cfg.KVHeads {
				region := pool[h*c.headStride*esize:][:span]
				c.mem.populate(region, page)
			}
		}
	}
}

// populate commits region's pages (region lies in p.used, which starts on
// a page): MADV_POPULATE_WRITE over the pages covering it (Linux ≥ 5.14),
// else a zero written to each page.
func (p *pools) populate(region []byte, page int) {
	off := int(uintptr(unsafe.Pointer(&region[0])) - uintptr(unsafe.Pointer(&p.used[0])))
	lo, hi := off&^(page-1), min((off+len(region)+page-1)&^(page-1), len(p.used))
	if unix.Madvise(p.used[lo:hi], unix.MADV_POPULATE_WRITE) == nil {
		return
	}
	for i := 0; i < len(region); i += page {
		region[i] = 0
	}
}
