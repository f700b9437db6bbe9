package jpegscale

import (
	"bytes"
	"context"
	"image/jpeg"
	"os"
	"testing"
)

// BenchmarkDecode decodes the real 1024x708 4:4:4 photo (398 KB) with
// image/jpeg at full size and with Decode at 1/4 and 1/8.
func BenchmarkDecode(b *testing.B) {
	data, err := os.ReadFile(photoPath)
	if err != nil {
		b.Skip(err)
	}
	ctx := context.Background()
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
	}
	b.Run("imagejpeg-full", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := jpeg.Decode(bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	for _, sc := range []struct {
		name  string
		scale int
	}{{"scale4", 4}, {"scale8", 8}} {
		b.Run(sc.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := Decode(ctx, data, sc.scale, 1<<24); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
	}
}
