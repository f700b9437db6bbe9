package store

import (
	"errors"
	"io"
)

// Content-defined chunking (FastCDC, Xia et al. 2016) with a gear rolling
// hash and normalised chunking. A boundary is declared where the hash of the
// last ~64 bytes matches a mask, so boundaries move with the content: an
// insertion shifts the bytes after it but the chunks after the next
// boundary are unchanged and deduplicate. doc.go quotes the measurement
// against fixed-size chunks that motivated this choice.
const (
	minChunk = 256 << 10 // no boundary before this: bounds the chunk count
	avgChunk = 1 << 20   // the normalisation point
	maxChunk = 4 << 20   // forced boundary: bounds memory per chunk

	// Normalised chunking: a stricter mask (2 more bits) before avgChunk
	// and a looser one (2 fewer) after it pull sizes towards the average.
	maskS uint64 = (1<<22 - 1) << (64 - 22)
	maskL uint64 = (1<<18 - 1) << (64 - 18)
)

// gear is the table of the gear hash: 256 pseudo-random words, fixed
// forever (changing it would change every chunk boundary and so dedup
// between versions imported by different builds).
var gear = func() [256]uint64 {
	var t [256]uint64
	x := uint64(0x9e3779b97f4a7c15) // splitmix64 seed
	for i := range t {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		t[i] = z ^ (z >> 31)
	}
	return t
}()

// cutPoint returns the length of the first chunk of b: FastCDC over at most
// maxChunk bytes. len(b) itself is returned when b is shorter than minChunk
// or no boundary is found before the end (the caller knows whether more data
// follows).
func cutPoint(b []byte) int {
	n := len(b)
	if n <= minChunk {
		return n
	}
	if n > maxChunk {
		n = maxChunk
	}
	normal := avgChunk
	if n < normal {
		normal = n
	}
	var h uint64
	i := minChunk
	for ; i < normal; i++ {
		h = (h << 1) + gear[b[i]]
		if h&maskS == 0 {
			return i + 1
		}
	}
	for ; i < n; i++ {
		h = (h << 1) + gear[b[i]]
		if h&maskL == 0 {
			return i + 1
		}
	}
	return n
}

// chunker splits a stream into content-defined chunks using one buffer of
// maxChunk bytes, so memory does not depend on the file size. It is not safe
// for concurrent use.
type chunker struct {
	r          io.Reader
	buf        []byte
	start, end int // buf[start:end] holds unread data
	eof        bool
}

func newChunker(r io.Reader) *chunker {
	return &chunker{r: r, buf: make([]byte, maxChunk)}
}

// next returns the next chunk, valid until the following call, or io.EOF.
func (c *chunker) next() ([]byte, error) {
	if c.end-c.start < maxChunk && !c.eof {
		// Slide the remainder to the front and refill.
		copy(c.buf, c.buf[c.start:c.end])
		c.end -= c.start
		c.start = 0
		for c.end < len(c.buf) {
			n, err := c.r.Read(c.buf[c.end:])
			c.end += n
			if errors.Is(err, io.EOF) {
				c.eof = true
				break
			}
			if err != nil {
				return nil, err
			}
		}
	}
	if c.start == c.end {
		return nil, io.EOF
	}
	n := cutPoint(c.buf[c.start:c.end])
	chunk := c.buf[c.start : c.start+n]
	c.start += n
	return chunk, nil
}
