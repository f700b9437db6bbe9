package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// syncBuffer is a bytes.Buffer safe to read while the command writes.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed on the next write; nil until a waiter needs it
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// waitFor waits until the output contains sub, or d passes, checking again
// on each write.
func (s *syncBuffer) waitFor(d time.Duration, sub string) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		if strings.Contains(s.b.String(), sub) {
			s.mu.Unlock()
			return true
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

// TestServeAndBenchTarget runs `edgeinfer serve` on the tiny model and
// points `edgeinfer bench --target` at it: the report's records come from
// the HTTP stream and its version matrix from the server's /version.
func TestServeAndBenchTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("serves and benchmarks for ~5 s")
	}
	orttest.Need(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "tinylm")
	if _, err := build.ImportHF(context.Background(), "../../../examples/tinylm", model, build.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	// generate --chat takes the path serve's chat completions take.
	var gen, genErr bytes.Buffer
	if code := runMain(context.Background(), &gen, &genErr, []string{"generate", "--model", model, "--chat", "--system", "Be brief.",
		"--prompt", "Call me Ishmael", "--max-tokens", "4", "--threads", "1"}); code != 0 || !strings.Contains(gen.String(), "finish=length") {
		t.Fatalf("generate --chat: exit %d\n%s\n%s", code, gen.String(), genErr.String())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, &out, []string{"--model", model, "--addr", addr, "--threads", "1", "--kv-budget", "16777216"})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	// serve prints "serving on" once its models are loaded and its socket
	// listens: from then on /ready answers
	if !out.waitFor(10*time.Second, "serving on") {
		t.Fatalf("serve did not start within 10 s: %s", out.String())
	}
	ready, err := http.Get("http://" + addr + "/ready")
	if err != nil || ready.StatusCode != 200 {
		t.Fatalf("serve printed its address but /ready answers %v %v: %s", ready, err, out.String())
	}
	ready.Body.Close()
	spec := writeBenchFile(t, dir, "spec.yaml", strings.Replace(benchSpecYAML, "sweep:", "#", 1))
	rep := filepath.Join(dir, "out")
	code, stdout, stderr := runBenchCLI("--spec", spec, "--target", "http://"+addr, "--model", "tinylm", "--out", rep)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	var r struct {
		Overall struct {
			Requests     int   `json:"requests"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"overall"`
		Versions struct {
			Target struct {
				Server   string            `json:"server"`
				Reported map[string]string `json:"reported"`
				Unknown  []string          `json:"unknown"`
			} `json:"target"`
		} `json:"versions"`
		Resources struct {
			Known bool `json:"known"`
		} `json:"resources"`
	}
	b, _ := os.ReadFile(filepath.Join(rep, "report.json"))
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	tg := r.Versions.Target
	if r.Overall.Requests == 0 || r.Overall.OutputTokens == 0 || !strings.HasPrefix(tg.Server, "edgeinfer/") ||
		!strings.Contains(tg.Reported["/version"], `"quantization"`) || len(tg.Unknown) == 0 || !r.Resources.Known {
		t.Fatalf("report: %+v\n%s", r, stdout)
	}
	if fi, err := os.Stat(filepath.Join(rep, "timelines.jsonl")); err != nil || fi.Size() == 0 {
		t.Fatalf("timelines.jsonl: %v", err)
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "768MiB": 768 << 20, "1.5GiB": 3 << 29, "2GB": 2e9, "64 KiB": 64 << 10} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "12XB", "MiB", "1e30GiB"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("%q: accepted", in)
		}
	}
}
