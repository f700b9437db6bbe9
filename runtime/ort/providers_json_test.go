package ort

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestProviderAttemptJSON(t *testing.T) {
	a := ProviderAttempt{Provider: CUDA, Reason: "provider library not found", Err: errors.New("ort: libonnxruntime_providers_cuda.so: cannot open"), Duration: 1500 * time.Microsecond}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"provider":"CUDA"`, `"reason":"provider library not found"`, `"error":"ort: libonnxruntime_providers_cuda.so: cannot open"`, `"duration_ms":1.5`, `"chosen":false`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
}
