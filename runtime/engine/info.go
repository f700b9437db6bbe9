package engine

import (
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/runtime/kvcache"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// ModelInfo is what a report's version matrix needs about a model.
type ModelInfo struct {
	Name         string                `json:"name"`
	Version      string                `json:"version,omitempty"`
	Kind         string                `json:"kind"`
	Path         string                `json:"path"`
	Digest       string                `json:"digest,omitempty"` // sha256 of the ONNX file
	Quantization string                `json:"quantization,omitempty"`
	Contract     string                `json:"contract,omitempty"`
	Geometry     *bundle.Geometry      `json:"geometry,omitempty"`
	KV           *kvcache.Config       `json:"kv,omitempty"`
	Provider     string                `json:"provider"`
	Attempts     []ort.ProviderAttempt `json:"provider_attempts,omitempty"`
	ORTVersion   string                `json:"onnxruntime_version"`
	LoadTime     time.Duration         `json:"load_time_ns"`
	// WeightHugePageBytes is how much of ONNX Runtime's memory for the
	// model was collapsed into transparent huge pages at load.
	WeightHugePageBytes int64 `json:"weight_huge_page_bytes"`
	// Attention is how a paged decoder graph computes attention, from its
	// metadata: llama.AttentionKernel or llama.AttentionPortable; empty for
	// other models.
	Attention string `json:"attention,omitempty"`
}

func infoOf(name string, b *bundle.Bundle) ModelInfo {
	m := &b.Manifest
	info := ModelInfo{Name: name, Version: m.Version, Kind: string(m.Kind), Path: b.Dir,
		Quantization: m.Quantization, Contract: string(m.Contract), Geometry: m.Geometry}
	for _, f := range m.Files {
		if f.Path == m.Model {
			info.Digest = f.SHA256
		}
	}
	return info
}

func (i *ModelInfo) setSession(s *ort.Session) {
	i.Provider = string(s.Provider())
	i.Attempts = s.ProviderAttempts()
	i.ORTVersion = ort.Version()
	i.WeightHugePageBytes = s.HugePageBytes()
	i.Attention = s.Info().Metadata[llama.MetadataAttention]
}
