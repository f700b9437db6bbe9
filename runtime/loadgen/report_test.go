package loadgen

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/power/powertest"
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

func TestParseSIMD(t *testing.T) {
	x86 := "processor\t: 0\nflags\t\t: fpu sse sse2 avx fma avx2 f16c\nprocessor\t: 1\nflags\t\t: fpu avx512f\n"
	if got := strings.Join(parseSIMD(x86), " "); got != "avx avx2 fma f16c" {
		t.Errorf("x86: %q (first processor's flags, in simdFlags order)", got)
	}
	arm := "processor\t: 0\nFeatures\t: fp asimd evtstrm aes asimddp sve i8mm\n"
	if got := strings.Join(parseSIMD(arm), " "); got != "asimd asimddp sve i8mm" {
		t.Errorf("arm64: %q", got)
	}
	if got := parseSIMD("garbage"); got == nil || len(got) != 0 {
		t.Errorf("no flags line: %#v, want an empty list", got)
	}
}

func FuzzParseSIMD(f *testing.F) {
	f.Add("flags\t: avx avx2\n")
	f.Add("Features: asimd\nflags: sve")
	f.Fuzz(func(t *testing.T, s string) {
		for _, x := range parseSIMD(s) {
			if !slices.Contains(simdFlags, x) {
				t.Fatalf("%q is not a SIMD flag we record", x)
			}
		}
	})
}
