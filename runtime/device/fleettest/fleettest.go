// Package fleettest runs a simulated fleet in one process, for tests and
// demos: each device is a whole device (runtime/device) with its own model
// store, outbox, MQTT link (to a real broker), update agent and engine,
// serving the tiny-test preset, so its health checks run in ONNX Runtime.
// Devices are the real device code; only their number and their process
// are simulated. Local is a fleet's cloud side for a device under test.
package fleettest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/runtime/device"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/update"
)

// Options configure simulated devices.
type Options struct {
	Broker string
	Fleet  string
	// Dir holds the devices' files (<Dir>/<device>/...).
	Dir string
	// ImageRoot and DirectorRoot are the roots provisioned on every
	// device (the repository's 1.root.json files).
	ImageRoot, DirectorRoot string
	// Model is the model every device keeps up to date.
	Model string
	Board string
	// Labels gives device i its labels (site, line, ...); nil: none.
	Labels func(i int) map[string]string
	// TelemetryInterval; 0 means 2 s.
	TelemetryInterval time.Duration
	// CheckInterval; 0 means 1 minute.
	CheckInterval time.Duration
	// Load, when above 0, runs one short generation per Load on each
	// device that has the model, so telemetry reports TTFT and goodput.
	Load time.Duration
	// MaxBytesPerSec caps each device's downloads (0: no cap).
	MaxBytesPerSec int64
	// SourceCAFile is the CA the fleet's static host's certificate
	// chains to (device.Update.SourceCAFile).
	SourceCAFile string
	// Now is each device's update clock (nil: time.Now): a test moves it
	// to play a board whose clock jumps.
	Now func() time.Time
}

// Device is one simulated device: a whole device (runtime/device) with
// its own store, outbox, link, engine and update agent, in this process.
type Device struct {
	ID  string
	dir string
	opt Options
	idx int

	dev *device.Device
	log LogKeeper

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

// Start starts device i named id.
func Start(ctx context.Context, opt Options, i int, id string) (*Device, error) {
	d := &Device{ID: id, dir: filepath.Join(opt.Dir, id), opt: opt, idx: i, log: LogKeeper{Tail: deviceLogLen}}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return nil, err
	}
	tiv, civ := cmp.Or(opt.TelemetryInterval, 2*time.Second), cmp.Or(opt.CheckInterval, time.Minute)
	var labels map[string]string
	if opt.Labels != nil {
		labels = opt.Labels(i)
	}
	cfg := device.Config{
		Store: filepath.Join(d.dir, "models.db"), Outbox: filepath.Join(d.dir, "outbox.db"),
		Engine: engine.Config{Session: ort.Options{IntraOpThreads: 1}, KV: engine.KVOptions{BudgetBytes: 2 << 20, DisableHugePages: true}},
		Broker: opt.Broker, Fleet: opt.Fleet, Device: id, Board: opt.Board,
		BackoffMin: device.Duration(100 * time.Millisecond), BackoffMax: device.Duration(2 * time.Second), KeepAlive: device.Duration(10 * time.Second),
		TelemetryInterval: device.Duration(tiv), FlushTimeout: device.Duration(2 * time.Second),
		Update: &device.Update{Model: opt.Model, ImageRoot: opt.ImageRoot, DirectorRoot: opt.DirectorRoot, MetadataDir: filepath.Join(d.dir, "tuf"),
			MaxBytesPerSec: opt.MaxBytesPerSec, SourceCAFile: opt.SourceCAFile, Labels: labels, CheckInterval: device.Duration(civ), RetryInterval: device.Duration(time.Second),
			RequestTimeout: device.Duration(5 * time.Second)},
		Logger: slog.New(slog.NewTextHandler(&d.log, nil)), // Info and above
		Now:    opt.Now,
	}
	var err error
	if d.dev, err = device.Open(ctx, cfg); err != nil {
		return nil, err
	}
	if opt.Load > 0 {
		lctx, cancel := context.WithCancel(context.Background())
		d.cancel = cancel
		d.wg.Add(1)
		go d.load(lctx)
	}
	return d, nil
}

// load runs one short greedy generation per Options.Load.
func (d *Device) load(ctx context.Context) {
	defer d.wg.Done()
	t := time.NewTicker(d.opt.Load)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if d.Active() == "" {
			continue
		}
		s := d.dev.Engine().GenerateTokens(ctx, d.opt.Model, []int32{1, 5, 9, 13}, engine.GenerateOptions{MaxTokens: 4, Sampling: &engine.Sampling{}})
		for range s.Tokens() {
		}
	}
}

// Active is the version the device's store has active ("" for none).
func (d *Device) Active() string {
	st, err := d.Status(context.Background())
	if err != nil {
		return ""
	}
	return st.Active
}

// Status is the device's update status (store pointers and journal).
func (d *Device) Status(ctx context.Context) (update.Status, error) {
	return d.dev.Updates().Status(ctx)
}

// Log returns the device's latest log records (Info and above, at most
// 8, oldest first): what a test prints when the fleet stalls.
func (d *Device) Log() []string { return d.log.Lines() }

// BytesFetched is the chunk payload the device downloaded.
func (d *Device) BytesFetched() int64 { return d.dev.Updates().BytesFetched() }

// Close shuts the device down as `edgeinfer agent` does (device.Close):
// the loop stops, the outbox is flushed briefly, the link says offline,
// everything closes. Idempotent.
func (d *Device) Close() error {
	d.once.Do(func() {
		if d.cancel != nil {
			d.cancel()
		}
		d.wg.Wait()
		d.err = d.dev.Close()
	})
	return d.err
}

// Fleet is a set of simulated devices.
type Fleet struct {
	Devices []*Device
	opt     Options
}

// StartFleet starts n devices named dev-000, dev-001, ... (a few at a
// time: each opens ONNX Runtime sessions and bbolt files).
func StartFleet(ctx context.Context, opt Options, n int) (*Fleet, error) {
	f := &Fleet{Devices: make([]*Device, n), opt: opt}
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d, err := Start(ctx, opt, i, fmt.Sprintf("dev-%03d", i))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			f.Devices[i] = d
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return f, nil
}

// Restart starts device i again (after Close), with its files as they were.
func (f *Fleet) Restart(ctx context.Context, i int) error {
	d, err := Start(ctx, f.opt, i, f.Devices[i].ID)
	if err != nil {
		return err
	}
	f.Devices[i] = d
	return nil
}

// Close closes every device, in parallel.
func (f *Fleet) Close() error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, d := range f.Devices {
		if d == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := d.Close()
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Versions counts devices by active version.
func (f *Fleet) Versions() map[string]int {
	out := map[string]int{}
	for _, d := range f.Devices {
		out[d.Active()]++
	}
	return out
}

// TinyBundle writes the tiny-test preset as bundle model@version into dir;
// layer "" keeps the preset's weights, else that layer's tensors come from
// the next seed (a release that changed one layer).
func TinyBundle(ctx context.Context, dir, model, version, layer string) error {
	return TinyRelease(ctx, dir, model, version, layer, 1)
}

// TinyRelease is TinyBundle with the changed layer's tensors from the
// preset's seed plus seed: a long series of releases, each changing one
// layer to weights no earlier release had.
func TinyRelease(ctx context.Context, dir, model, version, layer string, seed uint64) error {
	cfg, src, err := llama.Preset("tiny-test")
	if err != nil {
		return err
	}
	other := src
	other.Seed += seed
	_, err = build.BuildDecoder(ctx, dir, build.DecoderSpec{Name: model, Version: version, Config: cfg,
		Weights: layerSource{base: src, other: other, layer: layer}, CreatedBy: "fleettest"})
	return err
}

type layerSource struct {
	base, other llama.WeightSource
	layer       string
}

func (s layerSource) Tensor(name string) (llama.Tensor, error) {
	if s.layer != "" && len(name) >= len(s.layer) && name[:len(s.layer)] == s.layer {
		return s.other.Tensor(name)
	}
	return s.base.Tensor(name)
}

// GoldenPrompt is the health check prompt of the bundles SetHealth seals.
var GoldenPrompt = []int32{1, 17, 33, 65, 9}

// SetHealth seals the bundle in dir with a health check: the greedy
// output of GoldenPrompt as the bundle generates it — or, when wrong, that
// output shifted by one token, which the bundle will fail.
func SetHealth(ctx context.Context, dir string, n int, wrong bool) error {
	e, err := engine.Open(ctx, engine.Config{Models: []engine.ModelSpec{{Name: "g", Dir: dir}}, Session: ort.Options{IntraOpThreads: 1},
		KV: engine.KVOptions{BudgetBytes: 2 << 20, DisableHugePages: true}})
	if err != nil {
		return err
	}
	var out []int32
	for tok, err := range e.GenerateTokens(ctx, "g", GoldenPrompt, engine.GenerateOptions{MaxTokens: n, Sampling: &engine.Sampling{}}).Tokens() {
		if err != nil {
			return errors.Join(err, e.Close(ctx))
		}
		out = append(out, tok.ID)
	}
	if err := e.Close(ctx); err != nil {
		return err
	}
	if wrong {
		for i := range out {
			out[i] = (out[i] + 1) % 256
		}
	}
	b, err := bundle.Load(dir)
	if err != nil {
		return err
	}
	m := b.Manifest
	m.Health = &bundle.Health{PromptTokens: GoldenPrompt, ExpectTokens: out, MaxLatencyMS: 60000}
	var files []string
	for _, f := range m.Files {
		files = append(files, f.Path)
	}
	return bundle.Write(dir, &m, files...)
}
