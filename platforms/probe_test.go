package platforms

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// needORT skips where no ONNX Runtime library exists for this architecture
// at all (npm ships none for 32-bit arm), else defers to orttest.Need.
func needORT(t *testing.T) {
	t.Helper()
	if runtime.GOARCH == "arm" {
		t.Skip("no ONNX Runtime library is published for linux/arm (armv7)")
	}
	orttest.Need(t)
}

// The real chain on this machine's library: the CPU reference runs, every
// accelerator either passes against it or is skipped with ONNX Runtime's
// reason (on the project's x86 VMs: CUDA and TensorRT lack their provider
// libraries, the others are not in the build).
func TestCheckProviders(t *testing.T) {
	needORT(t)
	chain := ort.DefaultProviders()
	checks, err := CheckProviders(context.Background(), chain, ort.Options{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != len(chain) || checks[0].Provider != ort.CPU || checks[0].Status != "reference" {
		t.Fatalf("checks %+v", checks)
	}
	for _, c := range checks[1:] {
		switch c.Status {
		case "passed":
			if c.MaxAbsDiff == nil || *c.MaxAbsDiff > c.Tolerance {
				t.Errorf("%s passed with diff %v", c.Provider, c.MaxAbsDiff)
			}
		case "skipped":
			if c.Reason == "" || c.Reason == "not used" {
				t.Errorf("%s skipped without a reason", c.Provider)
			}
		default:
			t.Errorf("%s: %s %s", c.Provider, c.Status, c.Reason)
		}
		t.Logf("%s: %s %s", c.Provider, c.Status, c.Reason)
	}
}

func TestCheckProvidersNoLibrary(t *testing.T) {
	_, err := CheckProviders(context.Background(), nil, ort.Options{LibraryPath: "/nonexistent/libonnxruntime.so.1"})
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("err %v", err)
	}
}

func TestInspectELF(t *testing.T) {
	needORT(t)
	lib, err := ort.FindLibrary("")
	if err != nil {
		t.Fatal(err)
	}
	info, err := InspectELF(lib)
	if err != nil {
		t.Fatal(err)
	}
	if info.GOARCH != runtime.GOARCH || info.Glibc == "" || compareVersions(info.Glibc, "2.17") < 0 {
		t.Errorf("%+v", info)
	}
	have, libc, err := SystemGlibc("/")
	if err != nil {
		t.Skipf("not a glibc system: %v", err)
	}
	ok, why := GlibcCompatible(info.Glibc, have)
	t.Logf("%s needs %s; %s has %s: %v %s", lib, info.Glibc, libc, have, ok, why)
	if !ok {
		t.Errorf("the library this process loads claims to be incompatible: %s", why)
	}
	if _, err := InspectELF("testdata/rpi5/proc/cpuinfo"); err == nil {
		t.Error("cpuinfo parsed as ELF")
	}
	if _, _, err := SystemGlibc("testdata/rpi5"); err == nil || !strings.Contains(err.Error(), "no libc.so.6") {
		t.Errorf("fixture glibc: %v", err)
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{{"2.34", "2.4", 1}, {"2.28", "2.28", 0}, {"2.3.4", "2.3", 1}, {"PRIVATE", "2.0", -1}, {"", "2.17", -1}} {
		if got := compareVersions(tt.a, tt.b); got != tt.want {
			t.Errorf("compare(%q,%q)=%d", tt.a, tt.b, got)
		}
	}
	if ok, why := GlibcCompatible("2.34", "2.31"); ok || !strings.Contains(why, "GLIBC_2.34") {
		t.Errorf("%v %s", ok, why)
	}
}
