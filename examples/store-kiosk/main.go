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
	"net"
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
	addr := fs.String("addr", "127.0.0.1:8090", "listen address")
	cfg := Config{}
	fs.StringVar(&cfg.Chat, "chat", "", "decoder bundle for the assistant (default: import --hf)")
	fs.StringVar(&cfg.HF, "hf", "examples/tinylm", "Hugging Face directory imported when --chat is empty")
	fs.StringVar(&cfg.Models, "models", modelsDir(), "directory of platforms/models/fetch.sh")
	if err := fs.Parse(args); err != nil {
		return err
	}
	k, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer k.Close(context.WithoutCancel(ctx))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "store-kiosk: http://%s/\n", ln.Addr())
	return k.Serve(ctx, ln)
}

// Config names the kiosk's models.
type Config struct {
	Chat   string // decoder bundle; "" imports HF into a temporary directory
	HF     string
	Models string // holds blazeface/, silero/, images/
	// Tick is the camera's frame interval; 0 means 100 ms. The microphone
	// sends a 32 ms chunk every 32 ms, the summariser runs every 20 ticks.
	Tick time.Duration
}

// Kiosk is the running kiosk.
type Kiosk struct {
	e      *engine.Engine
	srv    *serve.Server
	stats  *board
	tmp    string
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	frame  []float32
	audio  []float32
	source string
}

// Open loads the three models into one engine and starts the realtime and
// batch loops.
func Open(ctx context.Context, cfg Config) (*Kiosk, error) {
	if cfg.Tick == 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	k := &Kiosk{stats: newBoard()}
	chat := cfg.Chat
	if chat == "" {
		dir, err := os.MkdirTemp("", "store-kiosk-chat")
		if err != nil {
			return nil, err
		}
		k.tmp = dir
		if _, err := build.ImportHF(ctx, cfg.HF, dir, build.ImportOptions{}); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("import %s: %w (run from the repository root, or pass --chat BUNDLE)", cfg.HF, err)
		}
		chat = dir
	}
	face := filepath.Join(cfg.Models, "blazeface", "face_detection_front_128x128_barracuda.onnx")
	vad := filepath.Join(cfg.Models, "silero", "silero_vad_v5.onnx")
	photo := filepath.Join(cfg.Models, "images", "locomotion-nude-male.jpg")
	for _, f := range []string{face, vad, photo} {
		if _, err := os.Stat(f); err != nil {
			k.removeTmp()
			return nil, fmt.Errorf("%w (run make setup: platforms/models/fetch.sh)", err)
		}
	}
	var err error
	if k.frame, err = cameraFrame(photo); err != nil {
		k.removeTmp()
		return nil, err
	}
	k.audio, k.source = microphoneAudio(ctx)
	k.e, err = engine.Open(ctx, engine.Config{
		Models:    []engine.ModelSpec{{Name: "chat", Dir: chat}, {Name: "face", Dir: face}, {Name: "vad", Dir: vad}},
		Observers: []engine.Observer{k.stats},
	})
	if err != nil {
		k.removeTmp()
		return nil, err
	}
	k.srv, err = serve.New(k.e, serve.Config{}, nil)
	if err != nil {
		return nil, errors.Join(err, k.e.Close(ctx), k.removeTmp())
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	k.cancel = cancel
	k.wg.Go(func() { k.camera(lctx, cfg.Tick) })
	k.wg.Go(func() { k.microphone(lctx) })
	k.wg.Go(func() { k.summariser(lctx, 20*cfg.Tick) })
	return k, nil
}

func (k *Kiosk) removeTmp() error {
	if k.tmp == "" {
		return nil
	}
	return os.RemoveAll(k.tmp)
}

// Close stops the loops, then the engine; it may be called again.
func (k *Kiosk) Close(ctx context.Context) error {
	var err error
	k.once.Do(func() {
		k.cancel()
		k.wg.Wait()
		k.srv.Close()
		err = errors.Join(k.e.Close(ctx), k.removeTmp())
	})
	return err
}

// Handler is the page, /kiosk/stats and runtime/serve's API.
func (k *Kiosk) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	mux.HandleFunc("GET /kiosk/stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(k.stats.snapshot())
	})
	mux.HandleFunc("GET /kiosk/timeline", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(k.stats.timeline(time.Now()))
	})
	mux.Handle("/", k.srv.Handler())
	return mux
}

// Serve serves Handler on ln until ctx ends.
func (k *Kiosk) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: k.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		err := hs.Shutdown(sctx)
		<-errc
		return errors.Join(ctx.Err(), err)
	case err := <-errc:
		return err
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

func (b *board) fail(model string, err error) {
	b.mu.Lock()
	b.state[model] = "error: " + err.Error()
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
