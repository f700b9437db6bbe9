package update_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/quant"
	"github.com/edgeinfer/edgeinfer/runtime/device"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// layerSource is a preset's weights with the tensors of one layer taken
// from another seed: a release that changed one layer.
type layerSource struct {
	base, other llama.WeightSource
	layer       string // "model.layers.N."
}

func (s layerSource) Tensor(name string) (llama.Tensor, error) {
	if s.layer != "" && strings.HasPrefix(name, s.layer) {
		return s.other.Tensor(name)
	}
	return s.base.Tensor(name)
}

// buildDecoder writes the preset as bundle name@version; layer "" keeps
// the preset's weights, else that layer comes from seed+1.
func buildDecoder(t testing.TB, preset, name, version, layer string, scheme string) string {
	t.Helper()
	cfg, src, err := llama.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	other := src
	other.Seed++
	opts := llama.Options{}
	if scheme != "" {
		em, err := quant.NewEmitter(scheme)
		if err != nil {
			t.Fatal(err)
		}
		opts.Emitter = em
	}
	dir := t.TempDir()
	if _, err := build.BuildDecoder(context.Background(), dir, build.DecoderSpec{
		Name: name, Version: version, Config: cfg, Weights: layerSource{base: src, other: other, layer: layer},
		Options: opts, CreatedBy: "update test",
	}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// setHealth re-seals a bundle with a health check.
func setHealth(t testing.TB, dir string, h *bundle.Health) {
	t.Helper()
	b, err := bundle.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := b.Manifest
	m.Health = h
	var files []string
	for _, f := range m.Files {
		files = append(files, f.Path)
	}
	if err := bundle.Write(dir, &m, files...); err != nil {
		t.Fatal(err)
	}
}

// golden runs the bundle greedily on prompt for n tokens.
func golden(t testing.TB, dir string, prompt []int32, n int) []int32 {
	t.Helper()
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Models: []engine.ModelSpec{{Name: "g", Dir: dir}}, Session: ort.Options{IntraOpThreads: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	var out []int32
	for tok, err := range e.GenerateTokens(ctx, "g", prompt, engine.GenerateOptions{MaxTokens: n, Sampling: &engine.Sampling{}}).Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tok.ID)
	}
	return out
}

// TestHealthCheckEngine runs real health checks: the staged version is
// loaded in ONNX Runtime and its golden prompt generated. A wrong golden
// output and a latency bound it cannot meet each keep the running version
// and send health_failed (with the figures) and rolled_back; a correct one
// activates.
func TestHealthCheckEngine(t *testing.T) {
	orttest.Need(t)
	e := newEnv(t, fleet.InitOptions{})
	e.cfg.Model = "tiny"
	prompt := []int32{1, 17, 33, 65, 9}

	v1 := buildDecoder(t, "tiny-test", "tiny", "1", "", "")
	want1 := golden(t, v1, prompt, 8)
	setHealth(t, v1, &bundle.Health{PromptTokens: prompt, ExpectTokens: want1})
	if _, _, err := e.repo.Publish(e.ctx, v1, fleet.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	act := device.CheckActivator{Store: e.st, Engine: engine.Config{Session: ort.Options{IntraOpThreads: 1}}}
	a, err := update.New(e.cfg, update.Deps{Store: e.st, Source: e.src, Activator: act, Events: e.events, Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(e.ctx); err != nil {
		t.Fatal(err)
	}
	if ev, ok := e.events.last(update.EventHealthOK); !ok || ev.Health == nil || ev.Health.Matched != len(want1) || ev.Health.LatencyMS <= 0 {
		t.Fatalf("health_ok event %+v", ev)
	}

	v2dir := func(version string) string {
		return buildDecoder(t, "tiny-test", "tiny", version, "model.layers.1.", "")
	}
	wrong := make([]int32, len(want1))
	for i, id := range want1 {
		wrong[i] = (id + 1) % 256
	}
	for _, tc := range []struct {
		version string
		health  func(good []int32) *bundle.Health
		reason  string
	}{
		{"2", func([]int32) *bundle.Health { return &bundle.Health{PromptTokens: prompt, ExpectTokens: wrong} }, "matched"},
		// 64 steps cannot finish within 1 ms.
		{"3", func(good []int32) *bundle.Health {
			return &bundle.Health{PromptTokens: prompt, ExpectTokens: good, MaxLatencyMS: 1}
		}, "bound"},
	} {
		dir := v2dir(tc.version)
		setHealth(t, dir, tc.health(golden(t, dir, prompt, 64)))
		if _, _, err := e.repo.Publish(e.ctx, dir, fleet.ReleaseOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Apply(e.ctx); !errors.Is(err, update.ErrHealth) {
			t.Fatalf("release %s: apply = %v, want a health failure", tc.version, err)
		}
		if e.active() != "1" {
			t.Fatalf("release %s: active %q after a failed check", tc.version, e.active())
		}
		ev, ok := e.events.last(update.EventHealthFailed)
		if !ok || ev.Version != tc.version || ev.Health == nil || !strings.Contains(ev.Health.Reason, tc.reason) {
			t.Fatalf("release %s: health_failed event %+v", tc.version, ev)
		}
		if ev, ok := e.events.last(update.EventRolledBack); !ok || ev.Version != tc.version {
			t.Fatalf("release %s: no rolled_back event", tc.version)
		}
		t.Logf("release %s refused by its check: %s (%.1f ms)", tc.version, ev.Health.Reason, ev.Health.LatencyMS)
	}
	dir := v2dir("4")
	setHealth(t, dir, &bundle.Health{PromptTokens: prompt, ExpectTokens: golden(t, dir, prompt, 8), MaxLatencyMS: 60000})
	if _, _, err := e.repo.Publish(e.ctx, dir, fleet.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(e.ctx); err != nil {
		t.Fatal(err)
	}
	if e.active() != "4" {
		t.Fatalf("active %q", e.active())
	}
}
