package engine

import (
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/internal/kvcache"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/plugin"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// ModelInfo is what a report's version matrix and the HTTP API need about
// a model. Engine.Models reads it afresh: a model loaded, unloaded or
// swapped shows at once.
type ModelInfo struct {
	Name         string                `json:"name"`
	Version      string                `json:"version,omitempty"`
	Kind         string                `json:"kind"`
	Path         string                `json:"path"`
	Digest       string                `json:"digest,omitempty"` // sha256 of the ONNX file
	Quantization string                `json:"quantization,omitempty"`
	Contract     string                `json:"contract,omitempty"`
	Geometry     *bundle.Geometry      `json:"geometry,omitempty"`
	KV           *KVInfo               `json:"kv,omitempty"`
	Provider     string                `json:"provider"`
	Attempts     []ort.ProviderAttempt `json:"provider_attempts,omitempty"`
	ORTVersion   string                `json:"onnxruntime_version"`
	LoadTime     time.Duration         `json:"load_time_ns"`
	// Loaded is when this version finished loading.
	Loaded time.Time `json:"loaded"`
	// Context is a decoder's context length: prompt and output positions
	// together.
	Context int `json:"context_length,omitempty"`
	// Tokenizer says a decoder has a tokenizer: Generate and Chat take
	// text, and tokens come with theirs. Without one, only GenerateTokens
	// serves it, with bare ids.
	Tokenizer bool `json:"tokenizer,omitempty"`
	// Embeddings is the size of the vectors Embed returns for this model:
	// a decoder whose graph has the hidden_states output, or a one-shot
	// sentence-embedding model with a tokenizer; 0 when it gives none.
	Embeddings int `json:"embeddings,omitempty"`
	// ChatTemplate says the bundle has a chat template, which Chat renders
	// conversations with; TurnEnd is the text that ends the template's
	// turns, where Chat stops ("" when the template marks none).
	ChatTemplate bool   `json:"chat_template,omitempty"`
	TurnEnd      string `json:"turn_end,omitempty"`
	// ToolFormat is how the chat template teaches the model to write a
	// tool call (Qwen's tags, Llama-3.1's "parameters"): a server that
	// constrains calls has the model write that. The plain JSON format
	// without a template.
	ToolFormat tokenizer.ToolFormat `json:"tool_format"`
	// WeightBytes is the size of the model's weight files.
	WeightBytes int64 `json:"weight_bytes,omitempty"`
	// ResidentBytes is what the version counts against the memory budget
	// (Config.MemoryBudgetBytes): its bundle's files and a decoder's KV
	// budget. LoadRSSBytes is the process's resident set growth measured
	// across its load (approximate when other work ran meanwhile; a
	// lazily mapped KV cache grows after it).
	ResidentBytes int64 `json:"resident_bytes,omitempty"`
	LoadRSSBytes  int64 `json:"load_rss_bytes,omitempty"`
	// WeightHugePageBytes is how much of ONNX Runtime's memory for the
	// model was collapsed into transparent huge pages at load.
	WeightHugePageBytes int64 `json:"weight_huge_page_bytes"`
	// Inputs and Outputs are a one-shot model's tensors (names, element
	// types, shapes with -1 for symbolic dimensions).
	Inputs  []ort.ValueInfo `json:"inputs,omitempty"`
	Outputs []ort.ValueInfo `json:"outputs,omitempty"`
	// Attention is how a paged decoder graph computes attention, from its
	// metadata: bundle.AttentionKernel or bundle.AttentionPortable; empty
	// for other models.
	Attention string `json:"attention,omitempty"`
	// Kernels are the variants of edgeinfer's own operators this CPU runs
	// (ort.Kernels): two hosts sold under one CPU name may differ.
	Kernels string `json:"kernels,omitempty"`
	// Plugins are the bundle's sandboxed plugins by stage ("pre", "post"):
	// module, digest, wazero version, compile and start-up. A decoder's pre
	// plugin works on the prompt text, so it takes Generate and Chat, not
	// GenerateTokens.
	Plugins map[string]plugin.Info `json:"plugins,omitempty"`
}

// KVInfo is a decoder's KV cache as built: geometry, element type, blocks
// and the options it was built with.
type KVInfo struct {
	Layers        int    `json:"layers"`
	KVHeads       int    `json:"kv_heads"`
	HeadDim       int    `json:"head_dim"`
	DType         string `json:"dtype"`
	BlockSize     int    `json:"block_size"`
	Blocks        int    `json:"blocks"`
	BytesPerToken int64  `json:"bytes_per_token"`
	// HugePages reports whether the pools were advised transparent huge
	// pages.
	HugePages bool      `json:"huge_pages"`
	Options   KVOptions `json:"options"`
}

func kvInfoOf(c kvcache.Config, st kvcache.Stats) *KVInfo {
	return &KVInfo{
		Layers: c.Layers, KVHeads: c.KVHeads, HeadDim: c.HeadDim, DType: c.DType.String(),
		BlockSize: c.BlockSize, Blocks: st.BlocksTotal, BytesPerToken: c.BlockBytes() / int64(max(c.BlockSize, 1)),
		HugePages: !c.DisableHugePages, Options: KVOptions(c.Options),
	}
}

func infoOf(name string, b *bundle.Bundle) ModelInfo {
	m := &b.Manifest
	info := ModelInfo{Name: name, Version: m.Version, Kind: string(m.Kind), Path: b.Dir,
		Quantization: m.Quantization, Contract: string(m.Contract), Geometry: m.Geometry}
	for _, f := range m.Files {
		if f.Path == m.Model {
			info.Digest = f.SHA256
		}
		if f.Path == m.Model || f.Path == m.Model+".data" {
			info.WeightBytes += f.Size
		}
	}
	return info
}

func (i *ModelInfo) setSession(s *ort.Session) {
	i.Provider = string(s.Provider())
	i.Attempts = s.ProviderAttempts()
	i.ORTVersion = ort.Version()
	i.WeightHugePageBytes = s.HugePageBytes()
	i.Attention = s.Info().Metadata[bundle.MetadataAttention]
	i.Kernels = ort.Kernels()
}
