package tokenizer

import (
	"os"
	"strings"
	"testing"
)

// BenchmarkEncode measures encoding throughput (MB/s of UTF-8 input) on the
// Moby-Dick paragraphs of the golden inputs, with the default merge cache
// and without one.
func BenchmarkEncode(b *testing.B) {
	text := strings.Join(readInputs(b).Moby, "\n\n")
	for _, name := range goldenSets {
		for _, c := range []struct {
			label   string
			entries int
		}{{"cache", DefaultCacheEntries}, {"nocache", 0}} {
			b.Run(name+"/"+c.label, func(b *testing.B) {
				data, err := os.ReadFile(tokenizerPath(b, name))
				if err != nil {
					b.Fatal(err)
				}
				tk, err := Parse(data, WithCacheSize(c.entries))
				if err != nil {
					b.Fatal(err)
				}
				tk.Encode(text) // warm the cache as a long-running process would
				b.SetBytes(int64(len(text)))
				b.ResetTimer()
				for b.Loop() {
					tk.Encode(text)
				}
			})
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	text := strings.Join(readInputs(b).Moby, "\n\n")
	tk := loadNamed(b, "llama3")
	ids := tk.Encode(text)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := tk.Decode(ids); err != nil {
			b.Fatal(err)
		}
	}
}
