package update_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/device"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// TestSwapWhileServing: an engine serves release 1 while streams run
// without pause; the agent installs release 2 through the engine's swap
// (health check against the staged version). No request fails, each is
// served by one version from its first token to its last, later ones by
// release 2; the longest gap between two tokens of a stream running across
// the swap is reported beside the p99 gap of streams before it.
func TestSwapWhileServing(t *testing.T) {
	orttest.Need(t)
	e := newEnv(t, fleet.InitOptions{})
	e.cfg.Model = "tiny"
	prompt := []int32{1, 17, 33, 65, 9}
	v1 := buildDecoder(t, "tiny-test", "tiny", "1", "", "")
	v2 := buildDecoder(t, "tiny-test", "tiny", "2", "model.layers.1.", "")
	setHealth(t, v2, &bundle.Health{PromptTokens: prompt, ExpectTokens: golden(t, v2, prompt, 8)})
	for _, d := range []string{v1} {
		if _, _, err := e.repo.Publish(e.ctx, d, fleet.ReleaseOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Release 1 goes in first, checked in an engine of its own.
	a0, err := update.New(e.cfg, update.Deps{Store: e.st, Source: e.src, Activator: device.CheckActivator{Store: e.st}, Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a0.Apply(e.ctx); err != nil {
		t.Fatal(err)
	}
	dir1 := e.st.Path() + ".models/tiny@1"
	eng, err := engine.Open(e.ctx, engine.Config{Models: []engine.ModelSpec{{Name: "tiny", Dir: dir1}}, Session: ort.Options{IntraOpThreads: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	a, err := update.New(e.cfg, update.Deps{Store: e.st, Source: e.src, Activator: device.EngineActivator{Engine: eng, Store: e.st},
		Events: update.EventFunc(func(ctx context.Context, ev update.Event) error {
			ev.Time = time.Now() // the real time of each step, for the log below
			return e.events.Emit(ctx, ev)
		}), Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.repo.Publish(e.ctx, v2, fleet.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}

	type result struct {
		start, end time.Time
		gaps       []time.Duration
		gapEnds    []time.Time
		version    string
		err        error
	}
	var (
		mu      sync.Mutex
		results []result
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		added   = make(chan struct{}, 1) // a result was added
	)
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := result{start: time.Now()}
				s := eng.GenerateTokens(e.ctx, "tiny", prompt, engine.GenerateOptions{MaxTokens: 32, Sampling: &engine.Sampling{}})
				last := time.Time{}
				for tok, err := range s.Tokens() {
					if err != nil {
						r.err = err
						break
					}
					if !last.IsZero() {
						r.gaps = append(r.gaps, tok.Time.Sub(last))
						r.gapEnds = append(r.gapEnds, tok.Time)
					}
					last = tok.Time
				}
				r.end = time.Now()
				sum := s.Summary()
				r.version = sum.Version
				if r.err == nil {
					r.err = sum.Err
				}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
				select {
				case added <- struct{}{}:
				default: // a wake-up is already pending
				}
			}
		})
	}
	// Wait for finished streams before and after the swap rather than a
	// fixed time: on a loaded machine one stream can take seconds.
	waitFor := func(ok func(r result) bool, n int) {
		deadline := time.After(time.Minute)
		for {
			mu.Lock()
			c := 0
			for _, r := range results {
				if ok(r) {
					c++
				}
			}
			mu.Unlock()
			if c >= n {
				return
			}
			select {
			case <-added:
			case <-deadline:
				return
			}
		}
	}
	waitFor(func(result) bool { return true }, 4)
	swapStart := time.Now()
	if _, err := a.Apply(e.ctx); err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	swapEnd := time.Now()
	waitFor(func(r result) bool { return r.start.After(swapEnd) }, 2)
	close(stop)
	wg.Wait()

	var before, across []time.Duration
	var after int
	var worst time.Duration
	var worstAt time.Time
	for _, r := range results {
		if r.err != nil {
			t.Fatalf("a request failed during the swap: %v", r.err)
		}
		switch {
		case r.end.Before(swapStart):
			before = append(before, r.gaps...)
			if r.version != "1" {
				t.Fatalf("request before the swap served by %q", r.version)
			}
		case r.start.After(swapEnd):
			after++
			if r.version != "2" {
				t.Fatalf("request after the swap served by %q", r.version)
			}
		default:
			across = append(across, r.gaps...)
			for i, g := range r.gaps {
				if g > worst {
					worst, worstAt = g, r.gapEnds[i]
				}
			}
		}
	}
	if len(before) == 0 || after == 0 || len(across) == 0 {
		t.Fatalf("streams: %d gaps before, %d across, %d requests after", len(before), len(across), after)
	}
	slices.Sort(before)
	p99 := before[len(before)*99/100]
	t.Logf("swap (apply with health check) took %v; longest gap across it %v, p99 gap before it %v (%d, %d gaps)",
		swapEnd.Sub(swapStart).Round(time.Millisecond), slices.Max(across).Round(time.Microsecond), p99.Round(time.Microsecond), len(across), len(before))
	if ev, ok := e.events.last(update.EventActive); !ok || ev.Version != "2" {
		t.Fatalf("no active event for 2")
	}
	staged, _ := e.events.last(update.EventStaged)
	checked, _ := e.events.last(update.EventHealthOK)
	t.Logf("the longest gap ended %v after the swap began (staged at %v, health check passed at %v; loading and checking happen between)",
		worstAt.Sub(swapStart).Round(time.Millisecond), staged.Time.Sub(swapStart).Round(time.Millisecond), checked.Time.Sub(swapStart).Round(time.Millisecond))
}
