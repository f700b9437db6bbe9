package device_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/runtime/device/fleettest"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// readmeHeading is the README section whose Go block is the embedding
// example this test builds.
const readmeHeading = "## The whole device in one package"

// readmeProgram is the first ```go block under readmeHeading.
func readmeProgram(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), readmeHeading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q section", readmeHeading)
	}
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(sec)
	if m == nil || !strings.Contains(m[1], "package main") {
		t.Fatalf("the README's %q section has no Go program", readmeHeading)
	}
	return m[1]
}

// TestREADMEEmbedding builds the README's embedding example as an
// application would (its own module, this checkout replacing the SDK) and
// runs it as a device of a local fleet: a real broker, a signed
// repository, the fleet's server. The first release lands on an empty
// store; while streamed OpenAI chat completions run against the
// program's HTTP API, a second release rolls out and swaps in, and no
// request fails. SIGTERM then stops it cleanly.
func TestREADMEEmbedding(t *testing.T) {
	orttest.Need(t)
	if testing.Short() {
		t.Skip("builds a program and rolls two releases out to it: not under -short")
	}
	src := readmeProgram(t)
	if n := goLines(src); n > 15 {
		t.Errorf("the README's program has %d lines of Go in main (goal ≤ 15)", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tmp := t.TempDir()
	app := buildApp(t, src, tmp)

	b := mosquittotest.Start(t, mosquittotest.Options{})
	lf, err := fleettest.StartLocal(ctx, b.URL(), "f", tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	// The releases are the tiny Llama of examples/tinylm (its tokenizer
	// makes chat text into tokens), as tiny@1 and tiny@2.
	for _, v := range []string{"1", "2"} {
		if err := lf.PublishHF(ctx, "../../examples/tinylm", "tiny", v); err != nil {
			t.Fatal(err)
		}
	}
	imageRoot, directorRoot := lf.Roots()

	addr := mustFreeAddr(t)
	cfg := map[string]any{
		"store": filepath.Join(tmp, "models.db"), "broker": b.URL(), "fleet": "f", "device": "kiosk-1",
		"telemetry_interval": "1s", "log_level": "warn",
		"engine": map[string]any{"session": map[string]any{"intra_op_threads": 1}},
		"http":   map[string]any{"addr": addr},
		"update": map[string]any{"model": "tiny", "image_root": imageRoot, "director_root": directorRoot,
			"check_interval": "1m", "retry_interval": "1s"},
	}
	cj, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(tmp, "device.json"), cj, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(app)
	cmd.Dir = tmp
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	if err := lf.WaitReported("kiosk-1", time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if err := lf.Roll(ctx, "tiny", "1"); err != nil {
		t.Fatal(err)
	}
	if err := lf.WaitActive("kiosk-1", "1", 2*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	active := func() string { return lf.Active("kiosk-1") }
	if !strings.Contains(out.String(), "HTTP API on "+addr) {
		t.Fatalf("the program did not log its HTTP address:\n%s", out.String())
	}

	// Streamed chat completions, one after another, until the second
	// release has swapped in and two more have finished on it.
	type result struct {
		err     error
		after   bool // started once 2 was active
		content string
	}
	results := make(chan result, 1024)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			after := active() == "2"
			c, err := fleettest.StreamChat(ctx, "http://"+addr, "tiny", "")
			results <- result{err, after, c}
		}
	}()
	first := <-results
	if first.err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("chat before the rollout: %v\n%s", first.err, out.String())
	}
	if err := lf.Roll(ctx, "tiny", "2"); err != nil {
		t.Fatal(err)
	}
	var n, after, failed int
	var failures []string
	deadline := time.After(3 * time.Minute)
	for after < 2 {
		select {
		case res := <-results:
			n++
			if res.err != nil {
				failed++
				failures = append(failures, res.err.Error())
			} else if res.after {
				after++
			}
		case <-deadline:
			close(stop)
			wg.Wait()
			t.Fatalf("rollout of 2: %d requests, %d after the swap, active %q:\n%s", n, after, active(), out.String())
		}
	}
	close(stop)
	wg.Wait()
	close(results)
	for res := range results {
		n++
		if res.err != nil {
			failed++
			failures = append(failures, res.err.Error())
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d chat completions failed during the rollout: %v", failed, n+1, failures)
	}
	t.Logf("%d streamed chat completions during the rollout of tiny@2, %d on 2, %d failed; the device runs %s", n+1, after, failed, active())

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the program exited with %v after SIGTERM:\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the program did not stop within 30 s of SIGTERM:\n%s", out.String())
	}
}

// goLines counts main's lines of Go: what an application writes.
func goLines(src string) int {
	_, body, _ := strings.Cut(src, "func main() {")
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if s := strings.TrimSpace(l); s != "" && s != "}" {
			n++
		}
	}
	return n
}

// buildApp builds src as an application's main package in a module of its
// own that requires the SDK, replaced by this checkout (offline: the
// module cache has what the SDK needs).
func buildApp(t *testing.T, src, tmp string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "app")
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	mod := fmt.Sprintf("module example.com/app\n\ngo 1.26\n\nrequire github.com/edgeinfer/edgeinfer v0.0.0\n\nreplace github.com/edgeinfer/edgeinfer => %s\n", root)
	for name, body := range map[string][]byte{"main.go": []byte(src), "go.mod": []byte(mod), "go.sum": sum} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(tmp, "app.bin")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off")
	if o, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the README's program: %v\n%s", err, o)
	}
	return bin
}

// syncBuffer is a bytes.Buffer safe for a process's two output streams.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func mustFreeAddr(t *testing.T) string {
	t.Helper()
	a, err := fleettest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}
