package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/platforms"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

func doctorJSON(t *testing.T, args ...string) doctorReport {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := runMain(context.Background(), &stdout, &stderr, append([]string{"doctor", "--json"}, args...)); code != 0 {
		t.Fatalf("doctor %v: exit %d: %s", args, code, stderr.String())
	}
	var r doctorReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("doctor %v: not JSON: %v\n%s", args, err, stdout.String())
	}
	return r
}

// Each profile's fixture names its board and provider order through the CLI.
func TestDoctorFixtures(t *testing.T) {
	for fixture, want := range map[string][2]string{
		"jetson-orin-nano": {"jetson-orin", "TensorRT → CUDA → CPU"},
		"rpi5":             {"rpi5", "XNNPACK → CPU"},
		"rpi4":             {"rpi4", "XNNPACK → CPU"},
		"rk3588":           {"rk3588", "CPU"},
		"qualcomm-qcs6490": {"qualcomm", "QNN → CPU"},
		"intel-core-ultra": {"intel-core-ultra", "OpenVINO(NPU) → OpenVINO(GPU) → OpenVINO(CPU) → CPU"},
		"x86-nvidia":       {"x86-nvidia", "TensorRT → CUDA → CPU"},
		"generic-arm64":    {"generic-arm64", "TensorRT → CUDA → OpenVINO → QNN → CoreML → XNNPACK → DirectML → CPU"},
	} {
		r := doctorJSON(t, "--root", filepath.Join("..", "..", "..", "platforms", "testdata", fixture), "--no-providers")
		if r.Board.ID != want[0] || r.Plan.ProviderOrder != want[1] {
			t.Errorf("%s: board %s providers %s, want %v", fixture, r.Board.ID, r.Plan.ProviderOrder, want)
		}
	}
	r := doctorJSON(t, "--root", filepath.Join("..", "..", "..", "platforms", "testdata", "lying-jetson-no-rails"), "--no-providers")
	var all []string
	for _, p := range r.Problems {
		all = append(all, p.Issue)
	}
	if !strings.Contains(strings.Join(all, "\n"), `"jetson-ina3221" expected`) {
		t.Errorf("no INA3221 problem in %v", all)
	}
}

// On this machine: the CPU provider is the reference, every other provider
// passes or is skipped with a reason, and every absent sensor has one.
func TestDoctorHere(t *testing.T) {
	if runtime.GOARCH == "arm" {
		t.Skip("no ONNX Runtime library is published for linux/arm")
	}
	orttest.Need(t)
	store := filepath.Join(t.TempDir(), "models.db")
	var out, errb bytes.Buffer
	bundle := writeTestBundle(t, "1", bytes.Repeat([]byte("w "), 1000))
	if code := runMain(context.Background(), &out, &errb, []string{"models", "--store", store, "import", bundle}); code != 0 {
		t.Fatalf("import: %s", errb.String())
	}
	r := doctorJSON(t, "--store", store)
	if !r.Library.Found || r.Library.Version == "" || r.Library.GOARCH != runtime.GOARCH || r.Library.GlibcNeeded == "" {
		t.Errorf("library %+v", r.Library)
	}
	if len(r.Providers) == 0 || r.Providers[0].Status != "reference" {
		t.Fatalf("providers %+v (%s)", r.Providers, r.ProvidersNote)
	}
	for _, p := range r.Providers[1:] {
		if p.Status != "passed" && (p.Status != "skipped" || p.Reason == "") {
			t.Errorf("provider %+v", p)
		}
	}
	for _, u := range r.Sensors.Absent {
		if u.Reason == "" {
			t.Errorf("absent sensor without a reason: %+v", u)
		}
	}
	for _, p := range r.Problems {
		if p.Issue == "" {
			t.Errorf("empty problem %+v", p)
		}
	}
	if r.Store == nil || !r.Store.OK || r.Store.Versions != 1 {
		t.Errorf("store %+v", r.Store)
	}

	// a damaged store is a problem with a fix
	if err := os.WriteFile(store, []byte("not a bbolt file"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = doctorJSON(t, "--store", store, "--no-providers")
	if r.Store == nil || r.Store.OK || len(r.Problems) == 0 {
		t.Errorf("corrupt store not reported: %+v", r.Store)
	}
}

func TestDoctorText(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := runMain(context.Background(), &stdout, &stderr, []string{"doctor", "--root", filepath.Join("..", "..", "..", "platforms", "testdata", "rk3588"), "--no-providers"})
	if code != 0 {
		t.Fatal(stderr.String())
	}
	for _, want := range []string{"board      rk3588 (Radxa ROCK 5B) — recognised", "session.intra_op_thread_affinities=6;7;8", "rknn-toolkit2", "absent   "} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, stdout.String())
		}
	}
	if code := runMain(context.Background(), &stdout, &stderr, []string{"doctor", "--board", "vax"}); code != 2 {
		t.Errorf("unknown board: exit %d", code)
	}
}

func TestApplyBoard(t *testing.T) {
	newFS := func(args ...string) *flag.FlagSet {
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		fs.Int("threads", 2, "")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return fs
	}
	plan, err := platforms.Detect(platforms.DetectOptions{Board: "rpi5"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{}
	cfg.Session.IntraOpThreads = 2 // the flag's default
	if err := applyBoard(newFS(), "rpi5", &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Session.IntraOpThreads != plan.Threads.IntraOp || platforms.ProviderNames(cfg.Session.Providers) != "XNNPACK → CPU" || cfg.KV.BudgetBytes != plan.KV.Bytes {
		t.Errorf("profile not applied: %+v %+v", cfg.Session, cfg.KV)
	}
	cfg = engine.Config{}
	cfg.Session.IntraOpThreads = 3
	if err := applyBoard(newFS("-threads", "3"), "auto", &cfg); err != nil || cfg.Session.IntraOpThreads != 3 {
		t.Errorf("explicit --threads lost: %v %d", err, cfg.Session.IntraOpThreads)
	}
	if err := applyBoard(newFS(), "amiga", &cfg); err == nil {
		t.Error("unknown board accepted")
	}
}
