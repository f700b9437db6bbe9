package jpegscale

import (
	"context"
	"encoding/binary"
	"image"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode: whatever the bytes, Decode never panics, and an image it
// returns has the frame header's size divided by the scale, rounded up.
func FuzzDecode(f *testing.F) {
	files, err := filepath.Glob("testdata/*.jpg")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, scale := range []int{4, 8} {
			m, err := Decode(context.Background(), b, scale, 1<<22)
			if err != nil {
				continue
			}
			w, h, ok := frameSize(b)
			if !ok {
				t.Fatalf("decoded an image of %v without a frame header", m.Bounds())
			}
			if want := image.Rect(0, 0, (w+scale-1)/scale, (h+scale-1)/scale); m.Bounds() != want {
				t.Fatalf("1/%d: bounds %v for a %dx%d frame, want %v", scale, m.Bounds(), w, h, want)
			}
		}
	})
}

// frameSize finds the first SOF0 or SOF1 header the way a reader of the
// marker segments would, independently of the decoder.
func frameSize(b []byte) (w, h int, ok bool) {
	for p := 2; p+1 < len(b); {
		if b[p] != 0xFF {
			p++
			continue
		}
		m := b[p+1]
		switch {
		case m == 0xFF || m == 0:
			p++
			continue
		case m >= 0xD0 && m <= 0xD7 || m == 0x01:
			p += 2
			continue
		}
		if p+4 > len(b) {
			return 0, 0, false
		}
		if (m == 0xC0 || m == 0xC1) && p+9 <= len(b) {
			return int(binary.BigEndian.Uint16(b[p+7:])), int(binary.BigEndian.Uint16(b[p+5:])), true
		}
		p += 2 + int(binary.BigEndian.Uint16(b[p+2:]))
	}
	return 0, 0, false
}
