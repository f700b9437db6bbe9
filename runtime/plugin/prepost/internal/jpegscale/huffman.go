package jpegscale

import (
	"encoding/binary"
	"errors"
)

// lookBits is how many bits of the stream one table lookup decodes. Nine
// covers nearly every code of the typical tables (annex K's longest
// frequent AC codes are 9 bits or shorter) with a 1 KiB table per class.
const lookBits = 9

// huffTable is one Huffman table (annex C), laid out for decoding.
type huffTable struct {
	defined bool
	// fast, indexed by the next lookBits bits of the stream: the code
	// length in the high byte and the symbol in the low byte, or 0 when
	// the code is longer than lookBits (no code has length 0).
	fast [1 << lookBits]uint16
	// maxCode[l] is the largest code of length l, or one below the first
	// code of that length when there is none; valOff[l] turns a code of
	// length l into an index of vals. The slow path uses them for codes
	// longer than lookBits (F.2.2.3).
	maxCode [17]int32
	valOff  [17]int32
	nvals   int
	vals    [256]uint8

	// For AC tables, the run/size symbol (F.1.2.2) decoded further:
	//
	// skip gives what block8, which only skips coefficients, needs: the
	// bits of the code and its extra bits (low byte) and how far the
	// coefficient index moves (high byte: run+1, 16 for ZRL, 0 for EOB).
	// 0 when the code is longer than lookBits.
	//
	// coef gives what block4 needs when the code and its extra bits both
	// fit in the lookahead: the bits of both (low byte), the run (bits
	// 8-15) and the coefficient's value (from bit 16, signed, never 0);
	// for ZRL a run of 16 and value 0, for EOB a run and value of 0. 0 for
	// longer codes.
	skip [1 << lookBits]uint16
	coef [1 << lookBits]int32
}

var errHuffOverflow = errors.New("canonical Huffman code overflows: more codes than their lengths allow")

// build makes the table from the DHT's counts of codes of each length 1-16
// and its symbols, assigning canonical codes as annex C does: codes of one
// length are consecutive, and the first code of the next length is the
// next code shifted left by one.
func (t *huffTable) build(counts *[16]uint8, vals []uint8) error {
	*t = huffTable{}
	code, k := int32(0), int32(0)
	for l := 1; l <= 16; l++ {
		n := int32(counts[l-1])
		first := code
		code += n
		// The codes of length l are first..code-1; code == 1<<l means
		// the last of them is all ones, which libjpeg accepts too.
		if code > 1<<l {
			return errHuffOverflow
		}
		t.maxCode[l] = code - 1
		t.valOff[l] = k - first
		if l <= lookBits {
			for c := first; c < code; c++ {
				lo := int(c) << (lookBits - l)
				e := uint16(l)<<8 | uint16(vals[k+c-first])
				for i := range 1 << (lookBits - l) {
					t.fast[lo+i] = e
				}
			}
		}
		k += n
		code <<= 1
	}
	t.nvals = copy(t.vals[:], vals)
	t.defined = true
	for c, e := range t.fast {
		if e == 0 {
			continue
		}
		rs, l := uint(e&0xFF), uint(e>>8)
		run, size := rs>>4, rs&15
		switch {
		case size != 0:
			t.skip[c] = uint16(run+1)<<8 | uint16(l+size)
			if l+size <= lookBits {
				v := uint64(c) << (64 - lookBits + l) // the extra bits, left-justified
				t.coef[c] = extend(v>>(64-size), size)<<16 | int32(run)<<8 | int32(l+size)
			}
		case run == 15:
			t.skip[c] = 16<<8 | uint16(l)
			t.coef[c] = 16<<8 | int32(l)
		default:
			t.skip[c] = uint16(l)
			t.coef[c] = int32(l)
		}
	}
	return nil
}

// slow decodes a code longer than lookBits from the top 16 bits of acc and
// returns its symbol and length; ok is false for a bit pattern that is no
// code of the table. Because canonical codes, left-justified, fill the
// code space from zero upwards, a prefix above maxCode of every shorter
// length is at least the first code of its own length, so the first length
// l whose prefix is at most maxCode[l] holds the code.
func (t *huffTable) slow(acc uint64) (sym, length uint, ok bool) {
	bits := int32(acc >> 48)
	for l := lookBits + 1; l <= 16; l++ {
		c := bits >> (16 - l)
		if c <= t.maxCode[l] {
			i := c + t.valOff[l]
			if i < 0 || int(i) >= t.nvals {
				return 0, 0, false
			}
			return uint(t.vals[i]), uint(l), true
		}
	}
	return 0, 0, false
}

// bitReader reads the entropy-coded segment of a scan most significant bit
// first, through a 64-bit buffer whose valid bits sit at the top.
//
// Filling it removes the 0x00 stuffed after each 0xFF data byte (F.1.2.3)
// and stops at a marker: from there on, it feeds zero bytes, as libjpeg does,
// so the decode loops need no end-of-data test. Those zeros are counted in
// pad, and a decoder that consumes any of them (n < pad) has run past the
// end of the segment: the stream is corrupt or truncated.
type bitReader struct {
	data   []byte
	pos    int    // the next byte to load
	acc    uint64 // n valid bits, left-justified
	n      uint
	pad    uint // how many of the last bits in acc are zeros fed past a marker
	marker bool // pos is at a marker (or the end of data)
}

// fill returns acc and n (the caller's copies of r.acc and r.n) topped up
// to more than 56 bits, so a caller that fills when fewer than 32 remain
// can decode a code (16 bits at most) and its extra bits (15 at most)
// without looking again. Taking and returning acc and n lets the decode
// loops keep them in registers; the compiler does not inline fill, so
// block8 and block4 repeat its fast path in their loops.
//
// The fast path takes the next 8 bytes when none is 0xFF: then they are
// data as they stand, and as many as fit go in at once. The test is the
// "has a zero byte" trick applied to ^w, where a 0xFF byte of w is a zero
// byte. At a marker the window holds its 0xFF, so the fast path never
// reads past one.
func (r *bitReader) fill(acc uint64, n uint) (uint64, uint) {
	if p := r.pos; p+8 <= len(r.data) {
		w := binary.BigEndian.Uint64(r.data[p:])
		if (^w-0x0101010101010101)&w&0x8080808080808080 == 0 {
			k := (64 - n) >> 3 // whole bytes that fit: 1 to 8
			r.pos = p + int(k)
			return acc | w>>(64-8*k)<<(64-n-8*k), n + 8*k
		}
	}
	r.acc, r.n = acc, n
	r.refill()
	return r.acc, r.n
}

// refill is fill's slow path, a byte at a time, on r.acc and r.n.
func (r *bitReader) refill() {
	for r.n <= 56 {
		var c byte
		if !r.marker && r.pos < len(r.data) {
			c = r.data[r.pos]
			switch {
			case c != 0xFF:
				r.pos++
			case r.pos+1 < len(r.data) && r.data[r.pos+1] == 0:
				r.pos += 2
			default:
				// A marker (or fill bytes before one): leave pos at
				// its 0xFF for the caller.
				r.marker = true
			}
		} else {
			r.marker = true
		}
		if r.marker {
			c = 0
			r.pad += 8
		}
		r.acc |= uint64(c) << (56 - r.n)
		r.n += 8
	}
}

// overrun reports whether the decoder has consumed bits past the end of the
// segment's data.
func (r *bitReader) overrun() bool { return r.n < r.pad }

// reset discards the buffered bits and continues at pos: the decoder is at
// a restart marker or the end of the scan, where the coder has padded the
// last byte with ones (F.1.2.3) that are never decoded.
func (r *bitReader) reset(pos int) {
	*r = bitReader{data: r.data, pos: pos}
}
