package fleet_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
	"github.com/edgeinfer/edgeinfer/update/rollout"
	"github.com/edgeinfer/edgeinfer/update/updatetest"
)

// TestChunkThroughput measures chunk serving: one fleet serve instance over
// MQTT (through mosquitto), two instances sharing the requests, and nginx
// over HTTPS on the same repository, each fetching every chunk of a 24 MiB
// release with 4 requests in flight, alternated over rounds. It logs MB/s;
// it fails only if a fetch fails or returns other bytes.
func TestChunkThroughput(t *testing.T) {
	if testing.Short() || os.Getenv("EDGEINFER_FLEET_THROUGHPUT") == "" {
		// A figure, not a property: on a loaded 2-core machine one request
		// of the 21 timed out after a minute (the broker-side stall of
		// SCALE.md is suspected), which must not fail CI's run.
		t.Skip("a measurement: set EDGEINFER_FLEET_THROUGHPUT=1 (and run without -short)")
	}
	if updatetest.NginxPath() == "" {
		t.Skip("nginx is not installed (apt-get install nginx)")
	}
	ctx := context.Background()
	b := mosquittotest.Start(t, mosquittotest.Options{})
	repoDir, keys := t.TempDir(), t.TempDir()
	r, err := fleet.Init(repoDir, keys, keys, fleet.InitOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rel, _, err := r.Publish(ctx, writeBundle(t, "1", map[string][]byte{"model.onnx": randBytes(9, 24<<20)}), fleet.ReleaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var chunks []store.Chunk
	var total int64
	for _, f := range rel.Files {
		for _, c := range f.Chunks {
			chunks = append(chunks, c)
			total += c.Size
		}
	}
	ng := updatetest.StartNginx(t, repoDir)
	l, err := link.Open(ctx, link.Config{Broker: b.URL(), Fleet: "f", Device: "bench"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	serve := func(name string) *fleet.Server {
		s, err := fleet.Serve(ctx, fleet.ServeConfig{Broker: b.URL(), Fleet: "f", Instance: name, Repo: repoDir})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WaitConnected(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s1 := serve("a")
	defer s1.Close()
	var s2 *fleet.Server
	mqtt := update.MQTTSource{R: rollout.Requester{L: l, Timeout: time.Minute}}
	https := update.HTTPSource{BaseURL: ng.URL, Client: ng.Client}
	fetchAll := func(src update.Source) time.Duration {
		start := time.Now()
		work := make(chan store.Chunk)
		var wg sync.WaitGroup
		errs := make(chan error, len(chunks))
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for c := range work {
					rc, err := src.FetchChunk(ctx, c.SHA256, c.Size)
					if err != nil {
						errs <- err
						continue
					}
					n, err := io.Copy(io.Discard, rc)
					rc.Close()
					if err != nil || n != c.Size {
						errs <- fmt.Errorf("chunk %s: %d bytes, %v", c.SHA256, n, err)
					}
				}
			}()
		}
		for _, c := range chunks {
			work <- c
		}
		close(work)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	mbps := func(d time.Duration) float64 { return float64(total) / 1e6 / d.Seconds() }
	var one, two, ngx []float64
	for round := range 3 {
		one = append(one, mbps(fetchAll(mqtt)))
		ngx = append(ngx, mbps(fetchAll(https)))
		if s2 == nil {
			s2 = serve("b") // connected: its shared subscriptions are acknowledged
			defer s2.Close()
		}
		two = append(two, mbps(fetchAll(mqtt)))
		_ = round
		// back to one instance for the next round
		s2.Close()
		s2 = nil
	}
	t.Logf("%d chunks, %.1f MB, 4 in flight; MB/s per round — fleet serve x1 over MQTT %.0f; x2 %.0f; nginx HTTPS %.0f (medians; rounds x1 %.0f, x2 %.0f, nginx %.0f)",
		len(chunks), float64(total)/1e6, median(one), median(two), median(ngx), one, two, ngx)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}
