package update_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/quant"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// randBytes returns n deterministic pseudo-random bytes for seed.
func randBytes(seed uint64, n int) []byte {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

// writeBundle writes a one-shot bundle name@version whose files are given.
func writeBundle(t testing.TB, name, version string, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	var names []string
	for p, b := range files {
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, p)
	}
	m := &bundle.Manifest{Name: name, Version: version, Kind: bundle.KindOneShot, Model: "model.onnx",
		Quantization: "fp32", CreatedBy: "update test"}
	if err := bundle.Write(dir, m, names...); err != nil {
		t.Fatal(err)
	}
	return dir
}

// env is a repository, a device store and an agent reading the
// repository through src.
type env struct {
	t       testing.TB
	ctx     context.Context
	repo    *fleet.Repository
	repoDir string
	keyDir  string
	st      *store.Store
	act     *fakeActivator
	events  *eventLog
	now     time.Time
	cfg     update.Config
	src     update.Source
}

func newEnv(t testing.TB, o fleet.InitOptions) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), repoDir: t.TempDir(), keyDir: t.TempDir(),
		now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), act: &fakeActivator{}, events: &eventLog{}}
	var err error
	e.repo, err = fleet.Init(e.repoDir, e.keyDir, "", o, e.clock)
	if err != nil {
		t.Fatal(err)
	}
	e.st, err = store.Open(e.ctx, filepath.Join(t.TempDir(), "device.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.st.Close() })
	e.src = update.FileSource{Dir: e.repoDir}
	e.cfg = update.Config{Model: "m", ImageRoot: e.repo.RootPath(update.RepoImage),
		Device: update.Device{ID: "dev-1", Board: "rpi5", Providers: []string{"cpu"}}}
	if o.Director {
		e.cfg.DirectorRoot = e.repo.RootPath(update.RepoDirector)
	}
	return e
}

func (e *env) clock() time.Time { return e.now }

func (e *env) agent() *update.Agent {
	e.t.Helper()
	a, err := update.New(e.cfg, update.Deps{Store: e.st, Source: e.src, Activator: e.act, Events: e.events, Now: e.clock})
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

// publish publishes m@version with the given files.
func (e *env) publish(version string, files map[string][]byte, o fleet.ReleaseOptions) *update.Release {
	e.t.Helper()
	rel, _, err := e.repo.Publish(e.ctx, writeBundle(e.t, "m", version, files), o)
	if err != nil {
		e.t.Fatal(err)
	}
	return rel
}

// active returns the store's active version of m ("" when none).
func (e *env) active() string {
	v, err := e.st.Resolve(e.ctx, e.cfg.Model)
	if err != nil {
		return ""
	}
	return v.Version
}

// fakeActivator stands in for the engine in tests of the update logic:
// it runs the check against a canned generator.
type fakeActivator struct {
	mu     sync.Mutex
	out    []int32 // what the "model" generates
	err    error   // Swap fails with this
	swaps  []store.Ref
	latest store.Ref
}

func (f *fakeActivator) Swap(ctx context.Context, ref store.Ref, check update.Check) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.swaps = append(f.swaps, ref)
	if f.err != nil {
		return f.err
	}
	if check != nil {
		if err := check(ctx, fakeGen{out: f.out}, ref.Name+"@staged"); err != nil {
			return err
		}
	}
	f.latest = ref
	return nil
}

type fakeGen struct{ out []int32 }

func (g fakeGen) GenerateGreedy(_ context.Context, _, _ string, _ []int32, n int) ([]int32, error) {
	return g.out[:min(n, len(g.out))], nil
}

// eventLog records events.
type eventLog struct {
	mu sync.Mutex
	ev []update.Event
}

func (l *eventLog) Emit(_ context.Context, e update.Event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ev = append(l.ev, e)
	return nil
}

func (l *eventLog) kinds() []update.EventKind {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []update.EventKind
	for _, e := range l.ev {
		out = append(out, e.Kind)
	}
	return out
}

func (l *eventLog) last(k update.EventKind) (update.Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.ev) - 1; i >= 0; i-- {
		if l.ev[i].Kind == k {
			return l.ev[i], true
		}
	}
	return update.Event{}, false
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func errorsIsNoUpdate(err error) bool { return errors.Is(err, update.ErrNoUpdate) }

// hashTwice is the device's per-byte verification work: the chunk digest
// on landing and the whole-file digest at publish.
func hashTwice(b []byte) {
	s1 := sha256.Sum256(b)
	s2 := sha256.Sum256(b)
	_, _ = s1, s2
}

func quantEmitter(scheme string) (llama.WeightEmitter, error) { return quant.NewEmitter(scheme) }
