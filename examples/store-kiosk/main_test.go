package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/runtime/device"
	"github.com/edgeinfer/edgeinfer/runtime/device/fleettest"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
	"github.com/edgeinfer/edgeinfer/runtime/serve"
)

func TestPct(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if pct(s, 50) != 5 || pct(s, 99) != 10 || pct(nil, 50) != 0 {
		t.Errorf("pct: %v %v", pct(s, 50), pct(s, 99))
	}
}

func openKiosk(t *testing.T, dc device.Config) (*Kiosk, string) {
	orttest.Need(t)
	if dc.HTTP == nil {
		dc.HTTP = &device.HTTP{Config: serve.Config{Addr: "127.0.0.1:0"}}
	}
	k, err := Open(t.Context(), Config{HF: "../tinylm", Models: modelsDir(), Device: dc})
	if err != nil {
		if strings.Contains(err.Error(), "make setup") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k.Close(); err != nil {
			t.Error(err)
		}
	})
	return k, strings.TrimSuffix(k.URL(), "/")
}

func stats(t *testing.T, url string) Stats {
	r, err := http.Get(url + "/kiosk/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var s Stats
	if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitBoard reads /kiosk/stats until done reports true of it, waking at
// each change of the board, and returns the last read; after d it returns
// what it has (the caller's checks then say what is missing).
func waitBoard(t *testing.T, k *Kiosk, url string, d time.Duration, done func(Stats) bool) Stats {
	t.Helper()
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		changed := k.stats.Changed()
		s := stats(t, url)
		if done(s) {
			return s
		}
		select {
		case <-changed:
		case <-timeout.C:
			return s
		}
	}
}

func find(s Stats, model, class string) *row {
	for i := range s.Rows {
		if s.Rows[i].Model == model && s.Rows[i].Class == class {
			return &s.Rows[i]
		}
	}
	return nil
}

// TestKiosk runs the three models on one engine, checks the live table
// fills with each at its class, asks the assistant through runtime/serve's
// API, and drives the page in headless Chromium: the DOM after the page
// asked a question holds the answer and a latency row per model, and the
// screenshot is the page (not blank).
func TestKiosk(t *testing.T) {
	k, url := openKiosk(t, device.Config{})
	_, err := exec.LookPath("espeak-ng")
	haveEspeak := err == nil
	s := waitBoard(t, k, url, 30*time.Second, func(s Stats) bool {
		f, v, b := find(s, "face", "realtime"), find(s, "vad", "realtime"), find(s, "chat", "batch")
		return f != nil && v != nil && b != nil && f.Count >= 5 && v.Count >= 5 && b.Count >= 1 && (!haveEspeak || s.Counters["utterances"] > 0)
	})
	for _, want := range [][2]string{{"face", "realtime"}, {"vad", "realtime"}, {"chat", "batch"}} {
		if r := find(s, want[0], want[1]); r == nil || r.Count == 0 || r.P50MS <= 0 {
			t.Fatalf("no %s/%s latencies after 30 s: %+v", want[0], want[1], s)
		}
	}
	if haveEspeak && s.Counters["utterances"] == 0 {
		t.Errorf("Silero VAD heard no utterance in espeak-ng's speech: %q", s.State["vad"])
	}
	if !strings.Contains(s.State["face"], "1 face(s)") {
		t.Errorf("camera state %q: BlazeFace should find the Muybridge face", s.State["face"])
	}

	var r *http.Response
	body := `{"model":"chat","prompt":"Call me Ishmael","max_tokens":12}`
	r, err = http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Choices []struct{ Text string }
	}
	json.NewDecoder(r.Body).Decode(&c)
	r.Body.Close()
	if r.StatusCode != 200 || len(c.Choices) != 1 || strings.TrimSpace(c.Choices[0].Text) == "" {
		t.Fatalf("completion: %d %+v", r.StatusCode, c)
	}
	// The request's record reaches the board after the answer: wait for it.
	s = waitBoard(t, k, url, 10*time.Second, func(s Stats) bool {
		ch := find(s, "chat", "interactive")
		return ch != nil && ch.TTFTMS != nil
	})
	if ch := find(s, "chat", "interactive"); ch == nil || ch.TTFTMS == nil {
		t.Errorf("the assistant's request is not on the board at interactive priority")
	}
	for _, r := range stats(t, url).Rows {
		t.Logf("%-5s %-11s n=%-4d p50 %7.2f ms  p99 %7.2f ms", r.Model, r.Class, r.Count, r.P50MS, r.P99MS)
	}
	chromium(t, url)
}

func chromium(t *testing.T, url string) {
	bin := ""
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(b); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("no headless Chromium (Debian: apt-get install chromium; .ci/run installs it)")
	}
	dir := t.TempDir()
	flags := func(extra ...string) []string {
		return append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
			"--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=1100,820", "--virtual-time-budget=15000"}, extra...)
	}
	page := url + "/?ask=Call+me+Ishmael"
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	dom, err := exec.CommandContext(ctx, bin, flags("--dump-dom", page)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	d := string(dom)
	i := strings.Index(d, `id="answer"`)
	if i < 0 {
		t.Fatalf("the page shows no answer:\n%s", d)
	}
	answer := d[i:min(len(d), i+200)]
	if !strings.Contains(answer, "Kiosk: Call me Ishmael") || len(strings.TrimSpace(answer)) < 40 {
		t.Errorf("answer %q", answer)
	}
	for _, m := range []string{"face", "vad", "chat"} {
		if !strings.Contains(d, fmt.Sprintf(`data-model="%s"`, m)) {
			t.Errorf("no live latency row for %s in the page", m)
		}
	}
	if n := strings.Count(d, `class="pt"`); n < 20 {
		t.Errorf("the timeline chart has %d points, want the last minute's requests", n)
	}
	// The chart's camera points are drawn in #c0392b below the panels.
	shot := filepath.Join(dir, "kiosk.png")
	if out, err := exec.CommandContext(ctx, bin, flags("--screenshot="+shot, page)...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != 1100 || img.Bounds().Dy() != 820 {
		t.Errorf("screenshot is %v, want 1100x820", img.Bounds())
	}
	if n := colours(img); n < 20 {
		t.Errorf("screenshot has %d colours: blank?", n)
	}
	// The answer is drawn in the page's green (#185c2a): its glyphs must be
	// in the chat panel (left half).
	if n := near(img, image.Rect(0, 100, 550, 450), [3]uint32{0x18, 0x5c, 0x2a}); n < 100 {
		t.Errorf("screenshot: %d pixels of the answer's colour in the chat panel, want a rendered answer", n)
	}
	if n := near(img, image.Rect(0, 480, 1100, 820), [3]uint32{0xc0, 0x39, 0x2b}); n < 30 {
		t.Errorf("screenshot: %d pixels of the camera's colour in the chart, want its points", n)
	}
	if out := os.Getenv("KIOSK_SCREENSHOT"); out != "" {
		os.WriteFile(out, b, 0o644)
	}
	t.Logf("screenshot %v, %d colours, %d bytes", img.Bounds(), colours(img), len(b))
}

// colours counts distinct colours on a sparse grid.
func colours(img image.Image) int {
	seen := map[[3]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen[[3]uint32{r, g, bl}] = true
		}
	}
	return len(seen)
}

// near counts pixels in r within 40 (per channel, 8-bit) of c.
func near(img image.Image, r image.Rectangle, c [3]uint32) int {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			d := func(a, b uint32) bool { return max(a>>8, b)-min(a>>8, b) <= 40 }
			if d(pr, c[0]) && d(pg, c[1]) && d(pb, c[2]) {
				n++
			}
		}
	}
	return n
}

// TestKioskRollout: the kiosk is a device of a local fleet (a real
// broker, a signed repository, the fleet's server). While the page's
// assistant chats (streamed chat completions one after another) and the
// camera and microphone run at realtime priority, the fleet rolls chat@2
// out and the device swaps it in; no chat request fails, no camera or
// microphone request errs, and the page, loaded in headless Chromium
// after the swap, still answers.
func TestKioskRollout(t *testing.T) {
	orttest.Need(t)
	if testing.Short() {
		t.Skip("a fleet, a rollout and Chromium: not under -short")
	}
	ctx := t.Context()
	tmp := t.TempDir()
	b := mosquittotest.Start(t, mosquittotest.Options{})
	lf, err := fleettest.StartLocal(ctx, b.URL(), "shop", tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := lf.PublishHF(ctx, "../tinylm", "chat", "2"); err != nil {
		t.Fatal(err)
	}
	imageRoot, directorRoot := lf.Roots()
	k, url := openKiosk(t, device.Config{Store: filepath.Join(tmp, "kiosk.db"), Broker: b.URL(), Fleet: "shop", Device: "kiosk-1",
		TelemetryInterval: device.Duration(time.Second),
		Update: &device.Update{Model: "chat", ImageRoot: imageRoot, DirectorRoot: directorRoot,
			CheckInterval: device.Duration(time.Minute), RetryInterval: device.Duration(time.Second)}})
	if err := lf.WaitActive("kiosk-1", "1", time.Minute); err != nil {
		t.Fatal(err) // chat@1, imported at start, reported
	}
	before, start := stats(t, url), time.Now()

	var chats, failed atomic.Int64
	var failures []string
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := fleettest.StreamChat(ctx, url, "chat", ""); err != nil {
				failed.Add(1)
				mu.Lock()
				failures = append(failures, err.Error())
				mu.Unlock()
			}
			chats.Add(1)
		}
	})
	if err := lf.Roll(ctx, "chat", "2"); err != nil {
		t.Fatal(err)
	}
	if err := lf.WaitActive("kiosk-1", "2", 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	for n := chats.Load(); chats.Load() < n+2; { // two more on 2
		if _, err := fleettest.StreamChat(ctx, url, "chat", ""); err != nil {
			t.Errorf("chat on 2: %v", err)
			break
		}
		chats.Add(1)
	}
	close(stop)
	wg.Wait()
	after := stats(t, url)
	if failed.Load() > 0 {
		t.Errorf("%d of %d chat completions failed during the rollout: %v", failed.Load(), chats.Load(), failures)
	}
	deadline := map[string]float64{"face": 100, "vad": 32} // the camera's and microphone's, ms
	for _, m := range []string{"face", "vad"} {
		if n := after.Counters["errors:"+m]; n > 0 {
			k.stats.mu.Lock()
			t.Errorf("%s: %d requests erred during the rollout: %q", m, n, k.stats.errs)
			k.stats.mu.Unlock()
		}
		b, a := find(before, m, "realtime"), find(after, m, "realtime")
		if a == nil || b == nil || a.Count <= b.Count {
			t.Errorf("%s did not run during the rollout: %+v then %+v", m, b, a)
			continue
		}
		late := 0
		for _, e := range k.stats.timeline(time.Now()) {
			if e.Model == m && !e.At.Before(start) && e.MS > deadline[m] {
				late++
			}
		}
		t.Logf("%s during the rollout: %d answered (%d of them after its %v ms deadline), %d dropped by the scheduler with the deadline passed, 0 errors; p99 of the last 200 %.2f ms",
			m, a.Count-b.Count, late, deadline[m], after.Counters["expired:"+m]-before.Counters["expired:"+m], a.P99MS)
	}
	t.Logf("%d streamed chat completions during the rollout of chat@2, %d failed; the kiosk runs chat@%s", chats.Load(), failed.Load(), lf.Active("kiosk-1"))
	if ms := k.d.State(ctx).Models; !slices.ContainsFunc(ms, func(m engine.ModelInfo) bool { return m.Name == "chat" && m.Version == "2" }) {
		t.Errorf("the engine serves %+v, want chat@2", ms)
	}
	chromium(t, url)
}
