package link

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
)

// BenchmarkOutboxVsFileStore sends 20,000 messages of 1 KiB at QoS 1
// through one mosquitto, alternately through the outbox (durable: group
// commits, each fsync'd) and through a paho client with its FileStore
// (which never fsyncs), three rounds each; it reports the medians and
// their ratio. Run with -benchtime=1x.
func BenchmarkOutboxVsFileStore(b *testing.B) {
	const n, size, rounds = 20_000, 1024, 3
	br := mosquittotest.Start(b, mosquittotest.Options{})
	ctx := context.Background()
	payload := seqPayload(1, size)
	var ob, fs []float64
	for r := 0; r < rounds; r++ {
		// outbox
		func() {
			dir := b.TempDir()
			st := openStoreB(b, filepath.Join(dir, "store.db"))
			defer st.Close()
			cfg := testConfig(br)
			cfg.ClientID = "bench-outbox-" + strconv.Itoa(r)
			l, err := Open(ctx, cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			if err := l.WaitConnected(ctx); err != nil {
				b.Fatal(err)
			}
			o, err := OpenOutbox(ctx, st, l, OutboxConfig{MaxBytes: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close()
			start := time.Now()
			for i := 0; i < n; i++ {
				if _, err := o.Enqueue(ctx, l.Topics().Telemetry(), ClassTelemetry, func(uint64) []byte { return payload }); err != nil {
					b.Fatal(err)
				}
			}
			if err := o.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			ob = append(ob, n/time.Since(start).Seconds())
		}()
		// paho FileStore
		func() {
			opts := mqtt.NewClientOptions().AddBroker(br.URL()).SetClientID("bench-filestore-" + strconv.Itoa(r)).
				SetCleanSession(false).SetStore(mqtt.NewFileStore(b.TempDir()))
			c := mqtt.NewClient(opts)
			if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				b.Fatal(tok.Error())
			}
			defer c.Disconnect(50)
			start := time.Now()
			toks := make([]mqtt.Token, 0, n)
			for i := 0; i < n; i++ {
				toks = append(toks, c.Publish("edgeinfer/v1/f/d/telemetry", 1, false, payload))
			}
			for _, t := range toks {
				if t.Wait(); t.Error() != nil {
					b.Fatal(t.Error())
				}
			}
			fs = append(fs, n/time.Since(start).Seconds())
		}()
	}
	mo, mf := median(ob), median(fs)
	b.Logf("outbox (fsync'd group commits) msg/s %v, paho FileStore (no fsync) msg/s %v", rounded(ob), rounded(fs))
	b.ReportMetric(mo, "outbox_msg/s")
	b.ReportMetric(mf, "filestore_msg/s")
	b.ReportMetric(mo/mf, "ratio")
}

// BenchmarkBacklogRSS enqueues 1,000,000 messages of 100 bytes while the
// broker is unreachable and reports resident memory above idle: the Go
// heap and other anonymous memory apart from the bbolt file's mapped pages
// (page cache the kernel can reclaim), then the same after reopening the
// outbox on the backlog (the restart case). Run alone, -benchtime=1x.
func BenchmarkBacklogRSS(b *testing.B) {
	const n = 1_000_000
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "store.db")
	st := openStoreB(b, path)
	defer st.Close()
	cfg := Config{Broker: "tcp://127.0.0.1:" + strconv.Itoa(mosquittotest.FreePort(b)), Fleet: "f", Device: "d", BackoffMin: time.Second, BackoffMax: time.Second}
	l, err := Open(ctx, cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	debug.FreeOSMemory() // count live memory, not garbage the runtime has yet to return
	anon0, file0 := rss(b)
	o, err := OpenOutbox(ctx, st, l, OutboxConfig{MaxBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := o.Enqueue(ctx, l.Topics().Telemetry(), ClassTelemetry, func(s uint64) []byte { return seqPayload(s, 100) }); err != nil {
			b.Fatal(err)
		}
	}
	if err := o.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	debug.FreeOSMemory()
	anon1, file1 := rss(b)
	if err := o.Close(); err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	o, err = OpenOutbox(ctx, st, l, OutboxConfig{MaxBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	reopen := time.Since(start)
	defer o.Close()
	debug.FreeOSMemory()
	anon2, file2 := rss(b)
	fi, _ := os.Stat(path)
	b.Logf("1,000,000 enqueued in %v (%.0f msg/s durable); depth %d; store file %d MiB; reopen %v",
		took.Round(time.Millisecond), n/took.Seconds(), o.Stats().Depth, fi.Size()>>20, reopen.Round(time.Millisecond))
	b.ReportMetric(float64(anon1-anon0)/(1<<20), "anon_MiB_above_idle")
	b.ReportMetric(float64(file1-file0)/(1<<20), "mapped_file_MiB")
	b.ReportMetric(float64(anon2-anon0)/(1<<20), "anon_MiB_after_reopen")
	b.ReportMetric(float64(file2-file0)/(1<<20), "mapped_file_MiB_after_reopen")
}

// BenchmarkSnapshot is the CPU cost of one telemetry snapshot (4 model ×
// class groups of 50 requests of 64 tokens) and its JSON.
func BenchmarkSnapshot(b *testing.B) {
	tel := NewTelemetry(nil, nil, TelemetryConfig{}, Sources{})
	t0 := time.Now()
	rec := Record{Outcome: "completed", Arrived: t0, FirstScheduled: t0.Add(time.Millisecond), FirstToken: t0.Add(20 * time.Millisecond), MetSLO: true}
	for k := 0; k < 64; k++ {
		rec.TokenTimes = append(rec.TokenTimes, rec.FirstToken.Add(time.Duration(k)*15*time.Millisecond))
	}
	rec.Finished = rec.TokenTimes[63]
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for _, m := range []string{"a", "b"} {
			for _, c := range []string{"interactive", "batch"} {
				r := rec
				r.Model, r.Class = m, c
				for i := 0; i < 50; i++ {
					tel.Observe(r)
				}
			}
		}
		b.StartTimer()
		s := tel.Snapshot()
		if _, err := json.Marshal(s); err != nil {
			b.Fatal(err)
		}
	}
}

// rss reads RssAnon and RssFile from /proc/self/status, in bytes.
func rss(b *testing.B) (anon, file int64) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "RssAnon:":
			anon = v << 10
		case "RssFile:":
			file = v << 10
		}
	}
	return anon, file
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func rounded(v []float64) string {
	var parts []string
	for _, x := range v {
		parts = append(parts, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(parts, " ")
}
