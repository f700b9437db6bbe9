package tokenizer

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The machines this project benchmarks on are shared, so wall-clock MB/s
// swings with the neighbours' load. cpu-MB/s divides by the process's CPU
// time (user + system, from getrusage) instead, which contention barely
// moves; quote it next to the wall-clock figure.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPUThroughput(b *testing.B, cpu0 time.Duration, bytesPerOp int) {
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(bytesPerOp)*float64(b.N)/cpu.Seconds()/1e6, "cpu-MB/s")
	}
}

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
				cpu0 := cpuTime()
				for b.Loop() {
					tk.Encode(text)
				}
				reportCPUThroughput(b, cpu0, len(text))
			})
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	text := strings.Join(readInputs(b).Moby, "\n\n")
	tk := loadNamed(b, "llama3")
	ids := tk.Encode(text)
	b.SetBytes(int64(len(text)))
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := tk.Decode(ids); err != nil {
			b.Fatal(err)
		}
	}
	reportCPUThroughput(b, cpu0, len(text))
}
