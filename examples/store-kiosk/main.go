// Command store-kiosk runs three models on one device under the engine's
// priorities: BlazeFace (is someone in front of the screen?) and Silero VAD
// (is someone speaking?) at realtime priority, the tiny language model as
// the kiosk's assistant at interactive priority, and a summarisation job at
// batch priority. A browser page shows the chat and, live, each model's
// latency; the chat goes through runtime/serve's OpenAI-compatible API.
//
//	go run ./examples/store-kiosk [--addr 127.0.0.1:8090]
//
// Open http://127.0.0.1:8090/. The camera is the Muybridge plate's face
// (platforms/models/fetch.sh) sent as frames; the microphone is a
// synthetic signal (see README.md): the kiosk has no real sensors here.
package main

import (
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/metrics"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/device"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
	"github.com/edgeinfer/edgeinfer/runtime/serve"
)

//go:embed page.html
var page []byte

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := runMain(ctx, os.Stdout, os.Args[1:])
	stop()
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "store-kiosk:", err)
		os.Exit(1)
	}
}

func modelsDir() string {
	if r := os.Getenv("EDGEINFER_MODELS"); r != "" {
		return r
	}
	base, _ := os.UserCacheDir()
	return filepath.Join(base, "edgeinfer", "models")
}

func runMain(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("store-kiosk", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8090", "listen address (when --device-config has no http section)")
	devCfg := fs.String("device-config", "", "the device the kiosk runs on: the agent's JSON `file` (store, http, broker, fleet, update); default: a store of its own, no fleet")
	cfg := Config{}
	fs.StringVar(&cfg.Chat, "chat", "", "decoder bundle for the assistant (default: the store's chat model, imported from --hf when absent)")
	fs.StringVar(&cfg.HF, "hf", "examples/tinylm", "Hugging Face directory imported as chat@1 when the store has no chat model")
	fs.StringVar(&cfg.Models, "models", modelsDir(), "directory of platforms/models/fetch.sh")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *devCfg != "" {
		var err error
		if cfg.Device, err = device.LoadConfig(*devCfg); err != nil {
			return err
		}
	}
	if cfg.Device.HTTP == nil {
		cfg.Device.HTTP = &device.HTTP{Config: serve.Config{Addr: *addr}}
	}
	k, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "store-kiosk: %s\n", k.URL())
	<-ctx.Done()
	return k.Close()
}

// Config names the kiosk's models and the device it runs on.
type Config struct {
	Chat   string // decoder bundle; "" means the store's chat model
	HF     string // imported as chat@1 when the store has none
	Models string // holds blazeface/, silero/, images/
	// Tick is the camera's frame interval; 0 means 100 ms. The microphone
	// sends a 32 ms chunk every 32 ms, the summariser runs every 20 ticks.
	Tick time.Duration
	// Device is the device the kiosk is an application of (runtime/device;
	// its JSON form is the agent's file): the store, the HTTP API the
	// page is served on, and, with a broker and an update section for
	// "chat", the fleet's rollouts of the assistant. The kiosk adds its
	// camera and microphone models and its page. A zero Store means a
	// store of its own in a temporary directory; a nil HTTP means
	// 127.0.0.1:8090.
	Device device.Config
}

// Kiosk is the running kiosk.
type Kiosk struct {
	d      *device.Device
	e      *engine.Engine
	stats  *board
	tmp    string
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
	frame  []float32
	audio  []float32
	source string
}

// Open starts the device with the three models in its one engine, mounts
// the page on the device's HTTP API and starts the realtime and batch
// loops.
func Open(ctx context.Context, cfg Config) (_ *Kiosk, err error) {
	if cfg.Tick == 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	k := &Kiosk{stats: newBoard()}
	defer func() {
		if err != nil {
			err = errors.Join(err, k.removeTmp())
		}
	}()
	dc := cfg.Device
	if dc.LogLevel == "" && dc.Logger == nil {
		dc.LogLevel = "warn" // the page shows what happens; no line per request
	}
	if dc.HTTP == nil {
		dc.HTTP = &device.HTTP{Config: serve.Config{Addr: "127.0.0.1:8090"}}
	}
	face := filepath.Join(cfg.Models, "blazeface", "face_detection_front_128x128_barracuda.onnx")
	vad := filepath.Join(cfg.Models, "silero", "silero_vad_v5.onnx")
	photo := filepath.Join(cfg.Models, "images", "locomotion-nude-male.jpg")
	for _, f := range []string{face, vad, photo} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("%w (run make setup: platforms/models/fetch.sh)", err)
		}
	}
	if dc.Store == "" {
		if k.tmp, err = os.MkdirTemp("", "store-kiosk"); err != nil {
			return nil, err
		}
		dc.Store = filepath.Join(k.tmp, "kiosk.db")
	}
	if cfg.Chat != "" {
		dc.Engine.Models = append(slices.Clip(dc.Engine.Models), engine.ModelSpec{Name: "chat", Dir: cfg.Chat})
	} else if err := ensureChat(ctx, dc.Store, cfg.HF); err != nil {
		return nil, err
	}
	dc.Engine.Models = append(slices.Clip(dc.Engine.Models), engine.ModelSpec{Name: "face", Dir: face}, engine.ModelSpec{Name: "vad", Dir: vad})
	dc.Engine.Observers = append(slices.Clip(dc.Engine.Observers), k.stats)
	if k.frame, err = cameraFrame(photo); err != nil {
		return nil, err
	}
	k.audio, k.source = microphoneAudio(ctx)
	if k.d, err = device.Open(ctx, dc); err != nil {
		return nil, err
	}
	k.e = k.d.Engine()
	for pattern, h := range k.routes() {
		if err := k.d.Handle(pattern, h); err != nil {
			return nil, errors.Join(err, k.d.Close())
		}
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k.cancel = cancel
	k.wg.Go(func() { k.camera(lctx, cfg.Tick) })
	k.wg.Go(func() { k.microphone(lctx) })
	k.wg.Go(func() { k.summariser(lctx, 20*cfg.Tick) })
	return k, nil
}

// ensureChat imports the Hugging Face model in hf as chat@1 into the
// store and activates it, unless the store has an active chat model (a
// restart, or a version the fleet rolled out).
func ensureChat(ctx context.Context, path, hf string) (err error) {
	st, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	for e, err := range st.List(ctx) {
		if err != nil {
			return err
		}
		if e.Ref.Name == "chat" && e.Active {
			return nil
		}
	}
	dir, err := os.MkdirTemp("", "store-kiosk-chat")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if _, err := build.ImportHF(ctx, hf, dir, build.ImportOptions{Name: "chat", Version: "1"}); err != nil {
		return fmt.Errorf("import %s: %w (run from the repository root, or pass --chat BUNDLE)", hf, err)
	}
	ref, err := st.Import(ctx, dir, nil)
	if err != nil {
		return err
	}
	return st.Activate(ctx, ref.String())
}

func (k *Kiosk) removeTmp() error {
	if k.tmp == "" {
		return nil
	}
	return os.RemoveAll(k.tmp)
}

// URL is the page's address.
func (k *Kiosk) URL() string { return "http://" + k.d.HTTPAddr() + "/" }

// Close stops the loops, then the device; it may be called again.
func (k *Kiosk) Close() error {
	k.once.Do(func() {
		k.cancel()
		k.wg.Wait()
		k.err = errors.Join(k.d.Close(), k.removeTmp())
	})
	return k.err
}

// routes are the kiosk's own pages, served by the device's HTTP API beside
// the OpenAI-compatible endpoints the page asks.
func (k *Kiosk) routes() map[string]http.Handler {
	return map[string]http.Handler{
		"GET /{$}": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write(page)
		}),
		"GET /kiosk/stats": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(k.stats.snapshot())
		}),
		"GET /kiosk/timeline": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(k.stats.timeline(time.Now()))
		}),
	}
}

// cameraFrame is the face crop of the Muybridge plate (the one
// examples/facedetect finds a face in), as BlazeFace's input.
func cameraFrame(photo string) ([]float32, error) {
	b, err := os.ReadFile(photo)
	if err != nil {
		return nil, err
	}
	img, err := prepost.DecodeImage(b)
	if err != nil {
		return nil, err
	}
	c, err := prepost.Crop(img, image.Rect(15, 535, 85, 605))
	if err != nil {
		return nil, err
	}
	x, _, _ := prepost.Preprocess(c, prepost.BlazeFace)
	return x, nil
}

// camera sends a frame to BlazeFace every tick at realtime priority, each
// allowed one tick, and records whether a face is in front of the kiosk.
func (k *Kiosk) camera(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		x, err := ort.CopyTensor([]int64{1, 128, 128, 3}, k.frame)
		if err != nil {
			k.stats.fail("face", err)
			continue
		}
		out, err := k.e.Infer(ctx, "face", engine.Inputs{"input:0": x}, engine.InferOptions{Class: engine.ClassRealtime, SLO: engine.SLO{Deadline: tick}})
		x.Close()
		if err != nil {
			k.stats.fail("face", err)
			continue
		}
		d := func(n string) []float32 { v, _ := ort.Data[float32](out[n]); return v }
		faces := prepost.DecodeBlazeFace(append(slices.Clone(d("Identity:0")), d("Identity_1:0")...),
			append(slices.Clone(d("Identity_2:0")), d("Identity_3:0")...), 128, 0.5)
		out.Close()
		k.stats.setState("face", fmt.Sprintf("%d face(s)", len(faces)))
	}
}

// microphone sends 32 ms chunks (512 samples at 16 kHz, with the 64
// samples before them as context, as Silero's own wrapper does) to Silero
// VAD at realtime priority, carrying its state. The "microphone" plays
// k.audio in a loop: espeak-ng's speech between silences when espeak-ng is
// installed, otherwise a synthetic harmonic tone, which is not speech.
func (k *Kiosk) microphone(ctx context.Context) {
	const n, c = 512, 64
	t := time.NewTicker(32 * time.Millisecond)
	defer t.Stop()
	state := make([]float32, 2*128)
	x := make([]float32, c+n)
	speaking := false
	for off := 0; ; off = (off + n) % (len(k.audio) - n) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		copy(x, x[n:]) // the last 64 samples of the previous chunk
		copy(x[c:], k.audio[off:off+n])
		in, err1 := ort.CopyTensor([]int64{1, c + n}, x)
		st, err2 := ort.CopyTensor([]int64{2, 1, 128}, state)
		sr, err3 := ort.CopyTensor([]int64{}, []int64{16000})
		if err := errors.Join(err1, err2, err3); err != nil {
			k.stats.fail("vad", err)
			return
		}
		out, err := k.e.Infer(ctx, "vad", engine.Inputs{"input": in, "state": st, "sr": sr}, engine.InferOptions{Class: engine.ClassRealtime, SLO: engine.SLO{Deadline: 32 * time.Millisecond}})
		in.Close()
		st.Close()
		sr.Close()
		if err != nil {
			k.stats.fail("vad", err)
			continue
		}
		p, _ := ort.Data[float32](out["output"])
		ns, _ := ort.Data[float32](out["stateN"])
		if len(ns) == len(state) {
			copy(state, ns)
		}
		if len(p) > 0 {
			// Hysteresis as Silero's wrapper: speech starts above 0.5,
			// ends below 0.35.
			if !speaking && p[0] > 0.5 || speaking && p[0] < 0.35 {
				speaking = !speaking
				if speaking {
					k.stats.count("utterances")
				}
			}
			k.stats.setState("vad", fmt.Sprintf("speech p=%.2f (%s, %d utterance(s) heard)", p[0], k.source, k.stats.counter("utterances")))
		}
		out.Close()
	}
}

// microphoneAudio is what the microphone plays: a shopper's question
// spoken by espeak-ng with 1.5 s of silence after it, or, without
// espeak-ng, 2 s of a harmonic tone with noise and 2 s of faint noise.
func microphoneAudio(ctx context.Context) ([]float32, string) {
	if _, err := exec.LookPath("espeak-ng"); err == nil {
		if a, err := espeak(ctx, "hello, do you have gear oil in stock?"); err == nil {
			return append(append(make([]float32, 8000), a...), make([]float32, 24000)...), "espeak-ng speech"
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	a := make([]float32, 4*16000)
	for i := range a {
		s := float64(i) / 16000
		v := 0.01 * r.NormFloat64()
		if i < 2*16000 {
			f0 := 140 + 20*math.Sin(2*math.Pi*3*s)
			for h := 1.0; h <= 8; h++ {
				v += 0.08 / h * math.Sin(2*math.Pi*f0*h*s)
			}
		}
		a[i] = float32(v)
	}
	return a, "synthetic tone"
}

// espeak speaks text with espeak-ng and returns it at 16 kHz.
func espeak(ctx context.Context, text string) ([]float32, error) {
	f, err := os.CreateTemp("", "kiosk-*.wav")
	if err != nil {
		return nil, err
	}
	f.Close()
	defer os.Remove(f.Name())
	if out, err := exec.CommandContext(ctx, "espeak-ng", "-w", f.Name(), text).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("espeak-ng: %v: %s", err, out)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil || len(b) < 48 {
		return nil, fmt.Errorf("espeak-ng wrote no audio: %v", err)
	}
	rate := int(binary.LittleEndian.Uint32(b[24:]))
	pcm := b[44:]
	n := len(pcm) / 2
	out := make([]float32, n*16000/rate)
	for i := range out { // linear resampling to 16 kHz
		f := float64(i) * float64(rate) / 16000
		j := min(int(f), n-2)
		a := float64(int16(binary.LittleEndian.Uint16(pcm[2*j:])))
		c := float64(int16(binary.LittleEndian.Uint16(pcm[2*j+2:])))
		out[i] = float32((a + (c-a)*(f-float64(j))) / 32768)
	}
	return out, nil
}

// summariser runs a batch-priority generation every period: the kind of
// background job (a shift summary) that must not slow the realtime loops.
func (k *Kiosk) summariser(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s := k.e.Generate(ctx, "chat", "The day at the store was", engine.GenerateOptions{MaxTokens: 16, Class: engine.ClassBatch,
			Sampling: &engine.Sampling{RepetitionPenalty: 1.3}, ID: "summary"})
		text := ""
		for tok, err := range s.Tokens() {
			if err != nil {
				break
			}
			text += tok.Text
		}
		if sum := s.Summary(); sum.Err == nil {
			k.stats.setState("summary", text)
		}
	}
}

// board is the observer behind the page's live table: the last records
// of each model and class.
type board struct {
	mu       sync.Mutex
	rows     map[string]*row
	state    map[string]string
	counters map[string]int
	events   []event       // the last minute's finished requests, oldest first
	errs     []string      // the first errors of the camera and microphone
	changed  chan struct{} // closed (and replaced) whenever the board changes
}

// Changed returns a channel closed at the board's next change: a waiter
// takes it, reads the board, and waits on it if what it wants is not
// there yet.
func (b *board) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// touchLocked wakes the waiters of Changed.
func (b *board) touchLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// event is one finished request on the timeline chart.
type event struct {
	At    time.Time `json:"-"`
	Ago   float64   `json:"ago_s"` // seconds before the snapshot
	Model string    `json:"model"`
	Class string    `json:"class"`
	MS    float64   `json:"ms"`
	OK    bool      `json:"ok"`
}

// timeline returns the last minute's events, oldest first.
func (b *board) timeline(now time.Time) []event {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]event, 0, len(b.events))
	for _, e := range b.events {
		if d := now.Sub(e.At); d <= time.Minute {
			e.Ago = d.Seconds()
			out = append(out, e)
		}
	}
	return out
}

type row struct {
	Model    string    `json:"model"`
	Class    string    `json:"class"`
	Count    int       `json:"count"`
	Failed   int       `json:"failed"`
	LastMS   float64   `json:"last_ms"`
	P50MS    float64   `json:"p50_ms"`
	P99MS    float64   `json:"p99_ms"`
	TTFTMS   *float64  `json:"ttft_ms"`
	recent   []float64 // last 200 end-to-end latencies, ms
	lastTime time.Time
}

func newBoard() *board {
	return &board{rows: map[string]*row{}, state: map[string]string{}, counters: map[string]int{}, changed: make(chan struct{})}
}

func (b *board) count(name string) {
	b.mu.Lock()
	b.counters[name]++
	b.touchLocked()
	b.mu.Unlock()
}

func (b *board) counter(name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counters[name]
}

// ObserveTimeline is called by the engine once per finished request.
func (b *board) ObserveTimeline(t *metrics.Timeline) {
	e2e, ok := t.E2E()
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.touchLocked()
	key := t.Model + "/" + t.Class
	r := b.rows[key]
	if r == nil {
		r = &row{Model: t.Model, Class: t.Class}
		b.rows[key] = r
	}
	// The chart keeps a minute, at most 6000 requests (a busy minute
	// of camera and microphone is about 2500).
	cut := 0
	for cut < len(b.events) && (time.Since(b.events[cut].At) > time.Minute || len(b.events)-cut >= 6000) {
		cut++
	}
	b.events = append(b.events[cut:], event{At: time.Now(), Model: t.Model, Class: t.Class, MS: float64(e2e) / 1e6, OK: ok && t.Outcome == metrics.Completed})
	if t.Outcome != metrics.Completed || !ok {
		r.Failed++
		return
	}
	r.Count++
	r.LastMS = float64(e2e) / 1e6
	r.recent = append(r.recent, r.LastMS)
	if len(r.recent) > 200 {
		r.recent = r.recent[1:]
	}
	if ttft, ok := t.TTFT(); ok && t.Kind == "generate" {
		v := float64(ttft) / 1e6
		r.TTFTMS = &v
	}
	s := slices.Sorted(slices.Values(r.recent))
	r.P50MS, r.P99MS = pct(s, 50), pct(s, 99)
}

// fail records a camera or microphone request that got no answer: one
// whose deadline passed first (the scheduler drops it, by design: a late
// frame is worth nothing) apart from an error.
func (b *board) fail(model string, err error) {
	b.mu.Lock()
	if errors.Is(err, engine.ErrDeadline) {
		b.counters["expired:"+model]++
		b.touchLocked()
		b.mu.Unlock()
		return
	}
	b.state[model] = "error: " + err.Error()
	b.counters["errors:"+model]++
	if len(b.errs) < 20 {
		b.errs = append(b.errs, model+": "+err.Error())
	}
	b.touchLocked()
	b.mu.Unlock()
}

func (b *board) setState(model, s string) {
	b.mu.Lock()
	b.state[model] = s
	b.touchLocked()
	b.mu.Unlock()
}

// Stats is what /kiosk/stats returns.
type Stats struct {
	Rows     []row             `json:"rows"`
	State    map[string]string `json:"state"`
	Counters map[string]int    `json:"counters"`
}

func (b *board) snapshot() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := Stats{State: map[string]string{}, Counters: maps.Clone(b.counters)}
	for _, r := range b.rows {
		c := *r
		c.recent = nil
		s.Rows = append(s.Rows, c)
	}
	slices.SortFunc(s.Rows, func(a, b row) int {
		if a.Model != b.Model {
			if a.Model < b.Model {
				return -1
			}
			return 1
		}
		if a.Class < b.Class {
			return -1
		}
		return 1
	})
	for k, v := range b.state {
		s.State[k] = v
	}
	return s
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
