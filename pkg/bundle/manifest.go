package bundle

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// ManifestFile is the manifest's name inside a bundle.
const ManifestFile = "edgeinfer.json"

// FormatVersion is the manifest schema version this package writes and
// reads.
const FormatVersion = 1

// Kind says how a model runs.
type Kind string

const (
	// KindDecoder is an autoregressive language model run step by step.
	KindDecoder Kind = "decoder"
	// KindOneShot is a model run once per request (detector, classifier).
	KindOneShot Kind = "oneshot"
)

// Contract is a decoder's input/output convention; see package
// pkg/onnx/llama for both.
type Contract string

const (
	// ContractPaged reads the KV cache from block pools (edgeinfer's own
	// graphs).
	ContractPaged Contract = "paged"
	// ContractCompatible uses Optimum's past_key_values/present names.
	ContractCompatible Contract = "compatible"
)

// Manifest describes a bundle. It is plain data, serialised as
// edgeinfer.json.
type Manifest struct {
	Format  int    `json:"format"`
	Name    string `json:"name"`
	Version string `json:"version"`
	Kind    Kind   `json:"kind"`
	// Contract is set for decoders.
	Contract Contract `json:"contract,omitempty"`
	// Model is the ONNX file, relative to the bundle.
	Model string `json:"model"`
	// Tokenizer is the tokenizer.json file, or "" (synthetic models).
	Tokenizer string `json:"tokenizer,omitempty"`
	// Architecture is the Hugging Face architecture, when known.
	Architecture string      `json:"architecture,omitempty"`
	Geometry     *Geometry   `json:"geometry,omitempty"`
	Generation   *Generation `json:"generation,omitempty"`
	// Chat is the chat template (Hugging Face tokenizer_config.json's
	// chat_template), nil when the model has none.
	Chat *Chat `json:"chat,omitempty"`
	// Quantization is the weight format: "fp32", "int4-b32", …
	Quantization string `json:"quantization"`
	// Files lists every file of the bundle but the manifest.
	Files []File `json:"files"`
	// Plugins are the model's pre/post-processing modules, or nil.
	Plugins *Plugins `json:"plugins,omitempty"`
	// CreatedBy names the tool and the source: "edgeinfer model build
	// --preset tiny-test".
	CreatedBy string `json:"created_by"`
	// Health is the check a device runs on this version, loaded beside
	// the active one, before switching to it; nil: the version is only
	// checked to load.
	Health *Health `json:"health,omitempty"`
}

// Health is a bundle's golden check: a fixed input, the output the model
// must give for it within a tolerance, and a latency bound. For decoders
// the input is Prompt (or PromptTokens, for models without a tokenizer),
// generated greedily (temperature 0) for len(ExpectTokens) tokens.
type Health struct {
	// Prompt is the decoder's golden input text.
	Prompt string `json:"prompt,omitempty"`
	// PromptTokens is the golden input as token ids, used when Prompt is "".
	PromptTokens []int32 `json:"prompt_tokens,omitempty"`
	// ExpectTokens are the token ids greedy decoding must produce.
	ExpectTokens []int32 `json:"expect_tokens"`
	// MinMatchPercent is the share of ExpectTokens that must match
	// position by position (quantised variants may flip a near-tie); 0
	// means 100: all. Integers only: the check travels inside TUF metadata,
	// whose canonical JSON has no floating-point numbers.
	MinMatchPercent int `json:"min_match_percent,omitempty"`
	// MaxLatencyMS bounds the golden request's end-to-end time in
	// milliseconds on the device; 0: no bound.
	MaxLatencyMS int64 `json:"max_latency_ms,omitempty"`
}

// Validate checks the health check is usable.
func (h *Health) Validate() error {
	switch {
	case (h.Prompt == "") == (len(h.PromptTokens) == 0) || len(h.ExpectTokens) == 0:
		return fmt.Errorf("%w: health check needs one of prompt or prompt_tokens, and expect_tokens", ErrManifest)
	case len(h.ExpectTokens) > 4096:
		return fmt.Errorf("%w: health check expects %d tokens (at most 4096)", ErrManifest, len(h.ExpectTokens))
	case h.MinMatchPercent < 0 || h.MinMatchPercent > 100:
		return fmt.Errorf("%w: health min_match_percent %d (want 0..100)", ErrManifest, h.MinMatchPercent)
	case h.MaxLatencyMS < 0:
		return fmt.Errorf("%w: health max_latency_ms %v is negative", ErrManifest, h.MaxLatencyMS)
	}
	return nil
}

// Geometry is a decoder's shape as the runtime needs it.
type Geometry struct {
	Layers       int `json:"layers"`
	Heads        int `json:"heads"`
	KVHeads      int `json:"kv_heads"`
	HeadDim      int `json:"head_dim"`
	Hidden       int `json:"hidden,omitempty"`
	Vocab        int `json:"vocab"`
	MaxPositions int `json:"max_positions"`
	// BlockSize is the paged graph's tokens per KV block (fixed in the
	// graph); 0 for compatible decoders.
	BlockSize int `json:"block_size,omitempty"`
	// Logits is "last" (paged: input last_index selects one position per
	// row, logits [B, vocab]) or "all" (logits [B, T, vocab]).
	Logits string `json:"logits"`
	// KVDType is the paged graph's KV pool element type: "" or "float32",
	// "float16", or "int8" (pools int8 with key_scale.{i}/value_scale.{i}
	// inputs).
	KVDType string `json:"kv_dtype,omitempty"`
}

// KVInt8 reports whether the decoder reads int8 KV pages.
func (g Geometry) KVInt8() bool { return g.KVDType == KVDTypeInt8 }

// KVFloat16 reports whether the decoder reads float16 KV pools.
func (g Geometry) KVFloat16() bool { return g.KVDType == KVDTypeFloat16 }

// KV pool element types of Geometry.KVDType.
const (
	KVDTypeFloat32 = "float32"
	KVDTypeFloat16 = "float16"
	KVDTypeInt8    = "int8"
)

// Generation holds generation defaults (Hugging Face's
// generation_config.json, or the model's own).
type Generation struct {
	BOSTokenID        *int64  `json:"bos_token_id,omitempty"`
	EOSTokenIDs       []int64 `json:"eos_token_ids,omitempty"`
	PadTokenID        *int64  `json:"pad_token_id,omitempty"`
	Temperature       float64 `json:"temperature,omitempty"`
	TopK              int     `json:"top_k,omitempty"`
	TopP              float64 `json:"top_p,omitempty"`
	RepetitionPenalty float64 `json:"repetition_penalty,omitempty"`
	MaxNewTokens      int     `json:"max_new_tokens,omitempty"`
}

// Chat is a model's chat template: the Jinja text that formats a
// conversation (rendered by runtime/tokenizer.ChatTemplate) and the
// bos_token/eos_token texts it refers to.
type Chat struct {
	Template string `json:"template"`
	BOSToken string `json:"bos_token,omitempty"`
	EOSToken string `json:"eos_token,omitempty"`
}

// File is one bundle file with its size and lowercase hex sha256.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ParseManifest decodes and validates edgeinfer.json.
func ParseManifest(data []byte) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the manifest", ErrManifest)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate checks the manifest is complete and consistent: known kind and
// contract, safe relative file paths, each file listed once with a size and
// a sha256, model and tokenizer among the files, decoder geometry present.
func (m *Manifest) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrManifest}, args...)...)
	}
	if m.Format != FormatVersion {
		return bad("format %d (this build reads %d)", m.Format, FormatVersion)
	}
	if m.Name == "" {
		return bad("no name")
	}
	files := map[string]bool{}
	byPath := map[string]File{}
	for _, f := range m.Files {
		if !SafePath(f.Path) {
			return bad("file path %q must be relative, clean and inside the bundle", f.Path)
		}
		if f.Path == ManifestFile {
			return bad("the manifest cannot list itself")
		}
		if files[f.Path] {
			return bad("file %q listed twice", f.Path)
		}
		if f.Size < 0 || !hexSHA256.MatchString(f.SHA256) {
			return bad("file %q: size %d, sha256 %q", f.Path, f.Size, f.SHA256)
		}
		files[f.Path] = true
		byPath[f.Path] = f
	}
	if m.Plugins != nil {
		if err := m.Plugins.validate(byPath); err != nil {
			return err
		}
	}
	if !files[m.Model] {
		return bad("model file %q is not among the files", m.Model)
	}
	if m.Tokenizer != "" && !files[m.Tokenizer] {
		return bad("tokenizer file %q is not among the files", m.Tokenizer)
	}
	switch m.Kind {
	case KindOneShot:
		if m.Contract != "" {
			return bad("a oneshot model has no decoder contract")
		}
	case KindDecoder:
		if m.Contract != ContractPaged && m.Contract != ContractCompatible {
			return bad("decoder contract %q (want paged or compatible)", m.Contract)
		}
		g := m.Geometry
		if g == nil {
			return bad("decoder without geometry")
		}
		if g.Layers <= 0 || g.Heads <= 0 || g.KVHeads <= 0 || g.HeadDim <= 0 || g.Vocab <= 0 || g.MaxPositions <= 0 {
			return bad("geometry %+v has a non-positive size", *g)
		}
		if g.Heads%g.KVHeads != 0 {
			return bad("geometry: %d heads not a multiple of %d KV heads", g.Heads, g.KVHeads)
		}
		if m.Contract == ContractPaged && g.BlockSize <= 0 {
			return bad("paged decoder without block size")
		}
		switch g.KVDType {
		case "", KVDTypeFloat32:
		case KVDTypeInt8, KVDTypeFloat16:
			if m.Contract != ContractPaged {
				return bad("%s KV pools need the paged contract", g.KVDType)
			}
		default:
			return bad("geometry kv_dtype %q (want float32, float16 or int8)", g.KVDType)
		}
		if g.Logits != "last" && g.Logits != "all" {
			return bad("geometry logits %q (want last or all)", g.Logits)
		}
	default:
		return bad("kind %q (want decoder or oneshot)", m.Kind)
	}
	if m.Health != nil {
		if m.Kind != KindDecoder {
			return bad("a health check with a golden prompt needs a decoder")
		}
		if err := m.Health.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// SafePath accepts clean, relative, slash-separated paths that stay inside
// the bundle.

func SafePath(p string) bool {
	return p != "" && p != "." && !strings.HasPrefix(p, "/") && !strings.Contains(p, `\`) &&
		path.Clean(p) == p && p != ".." && !strings.HasPrefix(p, "../")
}

// Marshal encodes the manifest as indented JSON.
func (m *Manifest) Marshal() ([]byte, error) {
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	return append(out, '\n'), nil
}

// MetadataAttention is the ONNX model metadata key that says how a paged
// decoder graph computes attention: AttentionKernel or AttentionPortable. It
// lives here, with the bundle format, so that the device side reads it
// without linking the graph builder (pkg/onnx/llama writes it).
const (
	MetadataAttention = "edgeinfer.attention"
	// AttentionKernel: one ai.edgeinfer.PagedAttention node per layer,
	// edgeinfer's kernel (runtime/ort registers it with every session).
	AttentionKernel = "ai.edgeinfer.PagedAttention"
	// AttentionPortable: standard and com.microsoft operators only.
	AttentionPortable = "portable"
)
