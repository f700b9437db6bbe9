package jpegscale

import (
	"context"
	"encoding/binary"
)

// scanComp is one component of a scan with the tables it decodes with.
type scanComp struct {
	c      *component
	dc, ac *huffTable
	q      *[64]int32 // zigzag order
	w4     [64]int64  // scale 4: q times the step-1 weight (idct.go, rowFix)
	pred   int32      // DC prediction (F.2.1.1.1)
	h, v   int        // blocks per MCU across and down
}

// scan decodes one scan's entropy-coded data.
type scan struct {
	d       *decoder
	comps   []scanComp
	restart int
	r       bitReader
}

// decode runs the MCU loop (A.2) from pos and returns where the data ended.
func (s *scan) decode(ctx context.Context, pos int) (int, error) {
	d := s.d
	s.r = bitReader{data: d.b, pos: pos}
	// A scan of one component is not interleaved: its MCU is one block
	// and the blocks run in raster order over the component alone,
	// whatever its sampling factors (A.2.2). Interleaved MCUs hold h x v
	// blocks of each component (A.2.3).
	var mcusX, mcusY int
	if len(s.comps) == 1 {
		c := s.comps[0].c
		mcusX, mcusY = c.bw, c.bh
		s.comps[0].h, s.comps[0].v = 1, 1
	} else {
		mcusX, mcusY = ceilDiv(d.width, 8*d.hmax), ceilDiv(d.height, 8*d.vmax)
		for i := range s.comps {
			s.comps[i].h, s.comps[i].v = s.comps[i].c.h, s.comps[i].c.v
		}
	}
	left := s.restart // MCUs until the next restart marker
	next := 0         // the restart marker expected next, RST0-RST7 in turn
	for my := range mcusY {
		if ctx.Err() != nil {
			return 0, context.Cause(ctx)
		}
		for mx := range mcusX {
			if s.restart > 0 {
				if left == 0 {
					if err := s.restartMarker(next); err != nil {
						return 0, err
					}
					next = (next + 1) & 7
					left = s.restart
				}
				left--
			}
			for i := range s.comps {
				sc := &s.comps[i]
				for by := range sc.v {
					for bx := range sc.h {
						var err error
						x, y := mx*sc.h+bx, my*sc.v+by
						if x == sc.c.partialX || y == sc.c.partialY {
							err = s.blockEdge(sc, x, y)
						} else if d.scale == 8 {
							err = s.block8(sc, x, y)
						} else {
							err = s.block4(sc, x, y)
						}
						if err != nil {
							return 0, err
						}
					}
				}
			}
			if s.r.overrun() {
				return 0, d.formatErr(s.r.pos, "entropy-coded data ends inside MCU %d of %d", my*mcusX+mx, mcusX*mcusY)
			}
		}
	}
	return s.r.pos, nil
}

// restartMarker expects RSTn (n = want) where the reader stopped, and
// restarts the coder after it: the bit buffer is emptied and the DC
// predictions go back to zero (F.2.1.3.1).
func (s *scan) restartMarker(want int) error {
	b, p := s.r.data, s.r.pos
	if p < len(b) && b[p] == 0xFF {
		for p < len(b) && b[p] == 0xFF {
			p++
		}
		if p < len(b) && int(b[p]) == mRST0+want {
			s.r.reset(p + 1)
			for i := range s.comps {
				s.comps[i].pred = 0
			}
			return nil
		}
	}
	return s.d.formatErr(s.r.pos, "RST%d marker expected", want)
}

// dc decodes a block's DC difference (F.2.2.1) and updates the prediction.
// The caller has made sure at least 32 bits are buffered.
func (s *scan) dc(sc *scanComp) error {
	r := &s.r
	acc := r.acc
	e := sc.dc.fast[acc>>(64-lookBits)]
	t, l := uint(e&0xFF), uint(e>>8)
	if e == 0 {
		var ok bool
		if t, l, ok = sc.dc.slow(acc); !ok {
			return s.d.formatErr(r.pos, "bad DC Huffman code")
		}
	}
	// An 8-bit frame's DC differences have 11 bits at most (table F.1).
	if t > 11 {
		return s.d.formatErr(r.pos, "DC difference of %d bits", t)
	}
	acc <<= l
	if t != 0 {
		sc.pred += extend(acc>>(64-t), t)
		acc <<= t
	}
	r.acc, r.n = acc, r.n-l-t
	return nil
}

// extend turns the t extra bits v of a coefficient into its value (F.2.2.1,
// figure F.12): a leading 0 bit means a negative value, v - (2^t - 1).
func extend(v uint64, t uint) int32 {
	x := int32(v)
	neg := int32(v>>(t-1)&1) - 1 // -1 when the top bit is 0
	return x + neg&(1-1<<t)
}

// block8 decodes one block at scale 8: the DC term is all it needs, so the
// AC coefficients are skipped, code and extra bits together, without
// computing their values.
func (s *scan) block8(sc *scanComp, x, y int) error {
	r := &s.r
	if r.n < 32 {
		r.acc, r.n = r.fill(r.acc, r.n)
	}
	if err := s.dc(sc); err != nil {
		return err
	}
	ac := sc.ac
	acc, n := r.acc, r.n
	k := 1
	for k < 64 {
		if n < 32 {
			// fill's fast path, inlined by hand (fill is too big for
			// the compiler to inline; this saves 3-4%).
			if p := r.pos; p+8 <= len(r.data) {
				word := binary.BigEndian.Uint64(r.data[p:])
				if (^word-0x0101010101010101)&word&0x8080808080808080 == 0 {
					nb := (64 - n) >> 3
					r.pos = p + int(nb)
					acc |= word >> (64 - 8*nb) << (64 - n - 8*nb)
					n += 8 * nb
				} else {
					acc, n = r.fill(acc, n)
				}
			} else {
				acc, n = r.fill(acc, n)
			}
		}
		if e := ac.skip[acc>>(64-lookBits)]; e != 0 {
			l := uint(e & 0xFF)
			acc <<= l
			n -= l
			if e < 0x100 { // EOB
				break
			}
			k += int(e >> 8)
			continue
		}
		e := ac.fast[acc>>(64-lookBits)]
		rs, l := uint(e&0xFF), uint(e>>8)
		if e == 0 {
			var ok bool
			if rs, l, ok = ac.slow(acc); !ok {
				r.acc, r.n = acc, n
				return s.d.formatErr(r.pos, "bad AC Huffman code")
			}
		}
		size := rs & 15
		l += size
		acc <<= l
		n -= l
		if size == 0 {
			if rs != 0xF0 { // EOB (other runs with size 0 are read as EOB too, as libjpeg does)
				break
			}
			k += 16 // ZRL: sixteen zeros
			continue
		}
		k += int(rs>>4) + 1
	}
	r.acc, r.n = acc, n
	if k > 64 {
		return s.d.formatErr(r.pos, "AC coefficients past the end of a block")
	}
	c := sc.c
	if x < c.ow && y < c.oh {
		c.pix[y*c.stride+x] = dcSample(sc.pred, sc.q[0])
	}
	return nil
}

// block4 decodes one block at scale 4. Only the coefficients in rows and
// columns 0, 1, 3, 5 and 7 reach the 2x2 output (idct.go). As each of
// those arrives it is added, weighted, into the first step of the
// separable transform (its row's even or odd part); the rest are skipped
// like block8's, and the second step runs once at the end.
func (s *scan) block4(sc *scanComp, x, y int) error {
	r := &s.r
	if r.n < 32 {
		r.acc, r.n = r.fill(r.acc, r.n)
	}
	if err := s.dc(sc); err != nil {
		return err
	}
	w := &sc.w4
	var rows [16]int64 // step 1's sums, rowSlot's layout; rows[15] takes the rest
	rows[0] = int64(sc.pred) * w[0]
	kept := 0 // nonzero once an AC coefficient reaches the output
	ac := sc.ac
	acc, n := r.acc, r.n
	k := 1
	for k < 64 {
		if n < 32 {
			// fill's fast path, inlined by hand (fill is too big for
			// the compiler to inline; this saves 3-4%).
			if p := r.pos; p+8 <= len(r.data) {
				word := binary.BigEndian.Uint64(r.data[p:])
				if (^word-0x0101010101010101)&word&0x8080808080808080 == 0 {
					nb := (64 - n) >> 3
					r.pos = p + int(nb)
					acc |= word >> (64 - 8*nb) << (64 - n - 8*nb)
					n += 8 * nb
				} else {
					acc, n = r.fill(acc, n)
				}
			} else {
				acc, n = r.fill(acc, n)
			}
		}
		var v int32
		if e := ac.coef[acc>>(64-lookBits)]; e != 0 {
			l := uint(e & 0xFF)
			acc <<= l
			n -= l
			v = e >> 16
			if v == 0 {
				if e < 0x100 { // EOB
					break
				}
				k += 16 // ZRL
				continue
			}
			k += int(e >> 8 & 15)
		} else {
			e := ac.fast[acc>>(64-lookBits)]
			rs, l := uint(e&0xFF), uint(e>>8)
			if e == 0 {
				var ok bool
				if rs, l, ok = ac.slow(acc); !ok {
					r.acc, r.n = acc, n
					return s.d.formatErr(r.pos, "bad AC Huffman code")
				}
			}
			acc <<= l
			n -= l
			size := rs & 15
			if size == 0 {
				if rs != 0xF0 {
					break
				}
				k += 16
				continue
			}
			k += int(rs >> 4)
			v = extend(acc>>(64-size), size)
			acc <<= size
			n -= size
		}
		if k > 63 {
			r.acc, r.n = acc, n
			return s.d.formatErr(r.pos, "AC coefficients past the end of a block")
		}
		// Added without a branch: whether a coefficient is kept is
		// as good as random.
		slot := rowSlot[k] & 15
		rows[slot] += int64(v) * w[k]
		kept |= int(slot) - 15
		k++
	}
	r.acc, r.n = acc, n
	if k > 64 {
		return s.d.formatErr(r.pos, "AC coefficients past the end of a block")
	}
	c := sc.c
	x, y = 2*x, 2*y
	if x >= c.ow || y >= c.oh {
		return nil
	}
	var out [4]uint8 // top left, top right, bottom left, bottom right
	if kept != 0 {
		out = quarters(&rows)
	} else {
		v := dcSample(sc.pred, sc.q[0])
		out = [4]uint8{v, v, v, v}
	}
	i := y*c.stride + x
	c.pix[i] = out[0]
	if x+1 < c.ow {
		c.pix[i+1] = out[1]
	}
	if y+1 < c.oh {
		c.pix[i+c.stride] = out[2]
		if x+1 < c.ow {
			c.pix[i+c.stride+1] = out[3]
		}
	}
	return nil
}

// blockEdge decodes a block that the right or bottom edge of its
// component cuts: its output samples average only the samples inside the
// component, over boxes whose even frequencies no longer cancel, so it
// keeps all 64 coefficients (idct.go, averageBox).
func (s *scan) blockEdge(sc *scanComp, x, y int) error {
	r := &s.r
	if r.n < 32 {
		r.acc, r.n = r.fill(r.acc, r.n)
	}
	if err := s.dc(sc); err != nil {
		return err
	}
	var blk [64]int32 // row-major
	q := sc.q
	blk[0] = sc.pred * q[0]
	ac := sc.ac
	acc, n := r.acc, r.n
	k := 1
	for k < 64 {
		if n < 32 {
			acc, n = r.fill(acc, n)
		}
		e := ac.fast[acc>>(64-lookBits)]
		rs, l := uint(e&0xFF), uint(e>>8)
		if e == 0 {
			var ok bool
			if rs, l, ok = ac.slow(acc); !ok {
				r.acc, r.n = acc, n
				return s.d.formatErr(r.pos, "bad AC Huffman code")
			}
		}
		acc <<= l
		n -= l
		size := rs & 15
		if size == 0 {
			if rs != 0xF0 {
				break
			}
			k += 16
			continue
		}
		k += int(rs >> 4)
		if k > 63 {
			r.acc, r.n = acc, n
			return s.d.formatErr(r.pos, "AC coefficients past the end of a block")
		}
		blk[zigzag[k]] = extend(acc>>(64-size), size) * q[k]
		acc <<= size
		n -= size
		k++
	}
	r.acc, r.n = acc, n
	if k > 64 {
		return s.d.formatErr(r.pos, "AC coefficients past the end of a block")
	}
	c := sc.c
	// The samples of this block inside the component.
	w, h := min(8, c.width-8*x), min(8, c.height-8*y)
	step := s.d.scale
	for y0 := 0; y0 < h; y0 += step {
		oy := y*8/step + y0/step
		if oy >= c.oh {
			break
		}
		for x0 := 0; x0 < w; x0 += step {
			ox := x*8/step + x0/step
			if ox >= c.ow {
				break
			}
			c.pix[oy*c.stride+ox] = averageBox(&blk, x0, min(x0+step, w), y0, min(y0+step, h))
		}
	}
	return nil
}
