package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/plugintest"
)

func TestCharErrors(t *testing.T) {
	for _, tc := range []struct {
		got, want string
		errs, n   int
	}{
		{"LOT AB1-2345", "LOT AB1-2345\n", 0, 11},
		{"LOTAB1-2345", "LOT AB1-2345", 0, 11},  // spaces ignored
		{"LOT：AB1", "LOT:AB1", 0, 7},            // full-width colon
		{"LOT AB7-2345", "LOT AB1-2345", 1, 11}, // substitution
		{"", "EXP", 3, 3},
		{"EXP 2027-01-0", "EXP 2027-01-02", 1, 13},
	} {
		if e, n := CharErrors(tc.got, tc.want); e != tc.errs || n != tc.n {
			t.Errorf("CharErrors(%q, %q) = %d/%d, want %d/%d", tc.got, tc.want, e, n, tc.errs, tc.n)
		}
	}
}

// Missing models or plugins: the error says which file and what to run.
func TestMissingModels(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.png"), []byte("x"), 0o644)
	err := Run(t.Context(), &bytes.Buffer{}, Config{Images: dir, Models: t.TempDir(), Plugins: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "fetch.sh") || !strings.Contains(err.Error(), "make plugins") {
		t.Fatalf("err = %v", err)
	}
	if err := runMain(t.Context(), &bytes.Buffer{}, nil); err == nil || !strings.Contains(err.Error(), "--images") {
		t.Fatalf("no --images: %v", err)
	}
}

func TestGenerateLabelsRepeatable(t *testing.T) {
	a, err := GenerateLabels(3, 5, 3, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := GenerateLabels(3, 5, 3, 1, nil)
	for i := range a {
		if strings.Join(a[i].Lines, "|") != strings.Join(b[i].Lines, "|") || !bytes.Equal(pixels(a[i]), pixels(b[i])) {
			t.Fatalf("label %d differs between two runs with one seed", i)
		}
	}
}

func pixels(l Label) []byte {
	var buf bytes.Buffer
	fmt.Fprint(&buf, l.Image.Bounds())
	for y := l.Image.Bounds().Min.Y; y < l.Image.Bounds().Max.Y; y += 7 {
		for x := l.Image.Bounds().Min.X; x < l.Image.Bounds().Max.X; x += 7 {
			r, g, b, _ := l.Image.At(x, y).RGBA()
			buf.Write([]byte{byte(r), byte(g), byte(b)})
		}
	}
	return buf.Bytes()
}

// TestStation is the whole station: labels generated with known text
// (rotated up to 3 degrees, blurred twice, every second one on a region of
// the Muybridge plate, a public-domain photo), the real PaddleOCR models and
// the plugins built from source imported into a store, a real mosquitto,
// and a dashboard-side subscriber that checks every reading (JSON) and
// the line metrics (JSON, and Sparkplug B decoded by Eclipse Tahu's
// sparkplug-payload where node and the package are installed).
func TestStation(t *testing.T) {
	models := needStation(t)
	const n = 8
	photo, err := loadPhoto("")
	if err != nil || photo == nil {
		t.Skipf("no Muybridge plate beside the models (run make setup): %v", err)
	}
	labels, err := GenerateLabels(n, 7, 3, 2, photo)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteLabels(dir, labels); err != nil {
		t.Fatal(err)
	}
	// A corrupt image on the belt: reported, and the line goes on.
	if err := os.WriteFile(filepath.Join(dir, "torn.png"), []byte("\x89PNG\r\n\x1a\nnot really"), 0o644); err != nil {
		t.Fatal(err)
	}
	broker := mosquittotest.Start(t, mosquittotest.Options{})

	// The dashboard's side.
	dash, err := link.Open(t.Context(), link.Config{Broker: broker.URL(), Fleet: "plant-1", Device: "dashboard"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dash.Close()
	if err := dash.WaitConnected(t.Context()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var readings []Reading
	var metrics []LineMetrics
	var spb []string                  // "topic hex" lines
	arrived := make(chan struct{}, 1) // a message reached the dashboard
	signal := func() {
		select {
		case arrived <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
	base := link.NewTopics("plant-1", "ocr-1").Base()
	if err := dash.Subscribe(t.Context(), base+"ocr/#", 1, func(m link.Message) {
		defer signal()
		mu.Lock()
		defer mu.Unlock()
		switch m.Topic {
		case base + ReadingTopic:
			var r Reading
			if err := json.Unmarshal(m.Payload, &r); err != nil {
				t.Errorf("reading: %v: %s", err, m.Payload)
			}
			readings = append(readings, r)
		case base + MetricsTopic:
			var lm LineMetrics
			if err := json.Unmarshal(m.Payload, &lm); err != nil {
				t.Errorf("line metrics: %v: %s", err, m.Payload)
			}
			metrics = append(metrics, lm)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := dash.Subscribe(t.Context(), "spBv1.0/plant-1/#", 0, func(m link.Message) {
		mu.Lock()
		spb = append(spb, m.Topic+" "+hex.EncodeToString(m.Payload))
		mu.Unlock()
		signal()
	}); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	lm, err := RunStation(t.Context(), &out, Config{Images: dir, Models: models, Plugins: plugintest.Dir(t),
		Broker: broker.URL(), Fleet: "plant-1", Device: "ocr-1", Threads: 1})
	t.Logf("\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if lm.CharAccuracy == nil || *lm.CharAccuracy < 0.95 {
		t.Errorf("character accuracy %v, want >= 95 %% on these labels", lm.CharAccuracy)
	}
	if len(lm.Failed) != 1 || lm.Failed[0] != "torn.png" || !strings.Contains(out.String(), "torn.png: not read: ") {
		t.Errorf("the corrupt image: failed %v", lm.Failed)
	}
	if lm.Labels != n || lm.P50MS <= 0 || lm.P99MS < lm.P50MS {
		t.Errorf("line metrics %+v", lm)
	}

	deadline := time.After(10 * time.Second)
	for waiting := true; waiting; {
		mu.Lock()
		done := len(readings) == n && len(metrics) == 1 && strings.Contains(strings.Join(spb, "\n"), "/DDATA/ocr-1/paddleocr ")
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-arrived:
		case <-deadline:
			waiting = false
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(readings) != n || len(metrics) != 1 {
		t.Fatalf("the dashboard got %d readings and %d line metrics, want %d and 1", len(readings), len(metrics), n)
	}
	byName := map[string]Label{}
	for _, l := range labels {
		byName[l.Name+".png"] = l
	}
	for _, r := range readings {
		l, ok := byName[r.Image]
		if !ok || r.CharAccuracy == nil || r.Schema != "edgeinfer.ocr.reading/1" {
			t.Errorf("reading %+v", r)
			continue
		}
		if e, _ := CharErrors(r.Text, strings.Join(l.Lines, "\n")); e > 0 && *r.CharAccuracy == 1 {
			t.Errorf("%s: published accuracy 1 for %q, want %q", r.Image, r.Text, l.Lines)
		}
	}
	if *metrics[0].CharAccuracy != *lm.CharAccuracy {
		t.Errorf("published accuracy %v, printed %v", *metrics[0].CharAccuracy, *lm.CharAccuracy)
	}
	checkSparkplug(t, spb, n)
}

// checkSparkplug decodes the Sparkplug B messages with Eclipse Tahu and
// checks the NBIRTH and the paddleocr device's count of readings: its
// DBIRTH follows the NBIRTH at connection (count 0), and the line's
// DDATA carries the count under the alias the DBIRTH bound.
func checkSparkplug(t *testing.T, spb []string, n int) {
	joined := strings.Join(spb, "\n")
	for _, want := range []string{"spBv1.0/plant-1/NBIRTH/ocr-1 ", "spBv1.0/plant-1/DBIRTH/ocr-1/paddleocr ", "spBv1.0/plant-1/DDATA/ocr-1/paddleocr "} {
		if !strings.Contains(joined, want) {
			t.Fatalf("no %s message among %d Sparkplug messages", strings.TrimSpace(want), len(spb))
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Log("node is not installed: Sparkplug payloads not decoded by Tahu")
		return
	}
	tahu := os.Getenv("EDGEINFER_TAHU")
	if tahu == "" {
		tahu = filepath.Join(os.TempDir(), "edgeinfer-checks", "npm", "tahu", "node_modules", "sparkplug-payload")
	}
	if _, err := os.Stat(filepath.Join(tahu, "package.json")); err != nil {
		t.Logf("Eclipse Tahu's sparkplug-payload not at %s (.ci/run installs it): payloads not decoded", tahu)
		return
	}
	in := filepath.Join(t.TempDir(), "payloads.txt")
	if err := os.WriteFile(in, []byte(joined+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("node", "testdata/decode.js", tahu, in).CombinedOutput()
	if err != nil {
		t.Fatalf("Tahu's decoder: %v\n%s", err, out)
	}
	alias, found := "", false // realtime/completed's alias, bound by the DBIRTH
	var completed any
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var d struct {
			Topic   string
			Payload struct {
				Metrics []struct {
					Name  string
					Alias any
					Value any
				}
			}
		}
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		for _, m := range d.Payload.Metrics {
			switch {
			case strings.Contains(d.Topic, "/DBIRTH/ocr-1/paddleocr") && m.Name == "realtime/completed":
				alias, found, completed = fmt.Sprint(m.Alias), true, m.Value
			case strings.Contains(d.Topic, "/DDATA/ocr-1/paddleocr") && found && fmt.Sprint(m.Alias) == alias:
				completed = m.Value
			}
		}
	}
	if !found {
		t.Errorf("Tahu finds no realtime/completed metric in the DBIRTH:\n%s", out)
	} else if fmt.Sprint(completed) != fmt.Sprint(n) {
		t.Errorf("Tahu decodes realtime/completed = %v, want %d", completed, n)
	}
}

// needStation skips the test without what a station needs (the PaddleOCR
// models, ONNX Runtime), builds its plugins and returns the models' directory.
func needStation(t *testing.T) string {
	t.Helper()
	models := defaultModels()
	for _, f := range []string{"ch_PP-OCRv4_det_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx", dictFile} {
		if _, err := os.Stat(filepath.Join(models, f)); err != nil {
			t.Skipf("no %s (run make setup: platforms/models/fetch.sh)", filepath.Join(models, f))
		}
	}
	if _, err := ort.FindLibrary(""); err != nil {
		t.Skipf("ONNX Runtime unavailable (run make setup): %v", err)
	}
	for _, p := range []string{"imageprep", "dbpost", "ctc"} {
		plugintest.Build(t, "runtime/plugin/plugins/"+p)
	}
	return models
}

// TestTiltedLabels: labels turned up to 10 degrees and blurred (the
// README's hardest set: 12 labels, seed 3) are read line by line from the
// detector's rotated boxes. With axis-aligned boxes two tilted lines fell
// into one crop and accuracy was 92 %.
func TestTiltedLabels(t *testing.T) {
	models := needStation(t)
	photo, err := loadPhoto("")
	if err != nil || photo == nil {
		t.Skipf("no Muybridge plate beside the models (run make setup): %v", err)
	}
	labels, err := GenerateLabels(12, 3, 10, 3, photo)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteLabels(dir, labels); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	lm, err := RunStation(t.Context(), &out, Config{Images: dir, Models: models, Plugins: plugintest.Dir(t), Threads: 1})
	t.Logf("\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if lm.CharAccuracy == nil || *lm.CharAccuracy < 0.99 {
		t.Errorf("character accuracy %v at 10 degrees, want >= 99 %%", lm.CharAccuracy)
	}
}
