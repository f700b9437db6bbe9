package ort

import (
	"errors"
	"testing"
)

func TestSkipReasonMissingDependency(t *testing.T) {
	err := errors.New("plug-in /x/libonnxruntime_providers_cuda.so: Failed to load library /x/libonnxruntime_providers_cuda.so with error: libcublasLt.so.13: cannot open shared object file: No such file or directory")
	if got := skipReason(CUDA, err); got != "a library it links is missing (libcublasLt.so.13)" {
		t.Errorf("reason %q", got)
	}
	err = errors.New("/x/libonnxruntime_providers_cuda.so: cannot open shared object file")
	if got := skipReason(CUDA, err); got != "provider library not found (libonnxruntime_providers_cuda.so)" {
		t.Errorf("reason %q", got)
	}
	if !notInBuild(errors.New("CUDA execution provider is not enabled in this build.")) || notInBuild(nil) {
		t.Error("notInBuild")
	}
}

// Beside the npm library there are no provider libraries, so no plug-in is
// found (and TensorRT is never one: its library is a provider bridge).
func TestPluginLibraryAbsent(t *testing.T) {
	needLib(t)
	for _, p := range []Provider{CUDA, TensorRT, CPU} {
		if lib := pluginLibrary(p); lib != "" {
			t.Errorf("%s: plug-in %s", p, lib)
		}
	}
}
