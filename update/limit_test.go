package update_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// TestBandwidthCap: with a cap of 1 MiB/s, 3 MiB of missing chunks take
// three seconds of (synthetic) time, and the download events count up.
func TestBandwidthCap(t *testing.T) {
	e := newEnv(t, fleet.InitOptions{})
	e.publish("1", map[string][]byte{"model.onnx": randBytes(5, 2<<20), "layer2.bin": randBytes(6, 1<<20)}, fleet.ReleaseOptions{})
	synctest.Test(t, func(t *testing.T) {
		cfg := e.cfg
		cfg.MaxBytesPerSec = 1 << 20
		a, err := update.New(cfg, update.Deps{Store: e.st, Source: e.src, Activator: e.act, Events: e.events})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := a.Apply(e.ctx); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		want := time.Duration(float64(a.BytesFetched()) / float64(1<<20) * float64(time.Second))
		if took < want-10*time.Millisecond || took > want+100*time.Millisecond {
			t.Fatalf("%d bytes at 1 MiB/s took %v, want about %v", a.BytesFetched(), took, want)
		}
	})
	var pcts []float64
	for _, ev := range e.events.ev {
		if ev.Kind == update.EventDownloading {
			pcts = append(pcts, ev.Percent)
		}
	}
	if len(pcts) < 3 || pcts[len(pcts)-1] != 100 {
		t.Fatalf("download progress events %v", pcts)
	}
}
