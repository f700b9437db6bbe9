package loadgen

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/power/powertest"
	"github.com/edgeinfer/edgeinfer/platforms"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// TestReportJSONRoundTrip: report.json reads back into a Report (so tools
// can re-render or compare reports), provider attempts included, and the
// HTML written from the read-back report names why providers were skipped.
func TestReportJSONRoundTrip(t *testing.T) {
	res := sampledResult(t, powertest.NewFS(map[string]string{}), 30*time.Millisecond, func(int) {})
	res.Models = []engine.ModelInfo{{Name: "m", Kind: "decoder", Provider: "CPU", ORTVersion: "1.30.0", Attempts: []ort.ProviderAttempt{
		{Provider: "CUDA", Reason: "provider library not found", Err: errors.New("dlopen libonnxruntime_providers_cuda.so: no such file"), Duration: 2 * time.Millisecond},
		{Provider: "CPU", Chosen: true, Duration: 40 * time.Millisecond},
	}}}
	b, err := BuildReport(res).JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("report.json does not read back: %v", err)
	}
	m := back.Versions.Models[0]
	if m.Name != "m" || m.ORTVersion != "1.30.0" || len(m.Attempts) != 2 || m.Attempts[0].Error == "" || m.Attempts[1].DurationMs != 40 {
		t.Fatalf("model row read back as %+v", m)
	}
	var page strings.Builder
	if err := back.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "CPU (skipped CUDA: provider library not found)") {
		t.Error("report.html does not say why CUDA was skipped")
	}
}

// TestCPUOf: the version matrix names an ARM board's cores by their CPU
// part, an x86 CPU by its model name, and the vector extensions of either,
// from the board fixtures' /proc/cpuinfo (real boards' files).
func TestCPUOf(t *testing.T) {
	for _, c := range []struct{ fixture, model, simd string }{
		{"rk3588", "4×Cortex-A55, 4×Cortex-A76", "asimd asimddp asimdhp"},
		{"rpi5", "4×Cortex-A76", "asimd asimddp asimdhp"},
		{"generic-amd64", "AMD EPYC 9R14", "avx avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16"},
		{"lying-rk3588-no-parts", "unknown: /proc/cpuinfo names no model and no CPU part", "asimd asimddp asimdhp"},
	} {
		model, simd := cpuOf(platforms.ReadFacts(filepath.Join("..", "..", "platforms", "testdata", c.fixture)))
		if model != c.model || strings.Join(simd, " ") != c.simd {
			t.Errorf("%s: cpu %q, simd %q; want %q, %q", c.fixture, model, simd, c.model, c.simd)
		}
	}
}
