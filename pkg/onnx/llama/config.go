package llama

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// Architectures lists the Hugging Face architectures Build accepts. They
// share one decoder: pre-norm RMSNorm blocks, rotary position embeddings,
// grouped-query attention and a SwiGLU MLP. Qwen2 adds q/k/v biases.
// Mistral's sliding window is not applied: such a model is exact up to
// sliding_window tokens of context.
var Architectures = []string{"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"}

// Config is the part of a Hugging Face config.json the decoder needs.
// Absent optional fields take Hugging Face's defaults in ParseConfig.
type Config struct {
	Architectures         []string     `json:"architectures"`
	ModelType             string       `json:"model_type,omitempty"`
	HiddenSize            int          `json:"hidden_size"`
	IntermediateSize      int          `json:"intermediate_size"`
	NumHiddenLayers       int          `json:"num_hidden_layers"`
	NumAttentionHeads     int          `json:"num_attention_heads"`
	NumKeyValueHeads      int          `json:"num_key_value_heads,omitempty"`
	HeadDim               int          `json:"head_dim,omitempty"`
	VocabSize             int          `json:"vocab_size"`
	RMSNormEps            float64      `json:"rms_norm_eps"`
	RopeTheta             float64      `json:"rope_theta,omitempty"`
	RopeScaling           *RopeScaling `json:"rope_scaling,omitempty"`
	MaxPositionEmbeddings int          `json:"max_position_embeddings"`
	TieWordEmbeddings     bool         `json:"tie_word_embeddings"`
	AttentionBias         bool         `json:"attention_bias,omitempty"`
	BOSTokenID            TokenIDs     `json:"bos_token_id,omitempty"`
	EOSTokenID            TokenIDs     `json:"eos_token_id,omitempty"`
	TorchDtype            string       `json:"torch_dtype,omitempty"`
}

// RopeScaling is config.json's rope_scaling. Type "linear" divides
// positions by Factor; "llama3" rescales low frequencies as Llama 3.1 does.
// Hugging Face writes the type as "type" or, newer, "rope_type".
type RopeScaling struct {
	Type                          string  `json:"type,omitempty"`
	RopeType                      string  `json:"rope_type,omitempty"`
	Factor                        float64 `json:"factor"`
	LowFreqFactor                 float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor                float64 `json:"high_freq_factor,omitempty"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings,omitempty"`
}

// Kind returns the scaling type, whichever field holds it.
func (r *RopeScaling) Kind() string {
	if r.RopeType != "" {
		return r.RopeType
	}
	return r.Type
}

// TokenIDs is a token id field that config.json writes as null, one number
// or a list.
type TokenIDs []int64

// UnmarshalJSON accepts null, a number or an array of numbers.
func (t *TokenIDs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*t = nil
		return nil
	}
	if len(b) > 0 && b[0] == '[' {
		var ids []int64
		if err := json.Unmarshal(b, &ids); err != nil {
			return err
		}
		*t = ids
		return nil
	}
	var id int64
	if err := json.Unmarshal(b, &id); err != nil {
		return err
	}
	*t = TokenIDs{id}
	return nil
}

// ParseConfig decodes config.json, fills Hugging Face's defaults and
// validates the result.
func ParseConfig(data []byte) (*Config, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) applyDefaults() {
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
}

// Architecture returns the first architecture named, or "" when none is.
func (c *Config) Architecture() string {
	if len(c.Architectures) == 0 {
		return ""
	}
	return c.Architectures[0]
}

// QKVBias reports whether q/k/v projections carry biases (Qwen2, or a Llama
// with attention_bias).
func (c *Config) QKVBias() bool {
	return c.AttentionBias || c.Architecture() == "Qwen2ForCausalLM"
}

// OBias reports whether o_proj carries a bias (Llama's attention_bias).
func (c *Config) OBias() bool {
	return c.AttentionBias && c.Architecture() != "Qwen2ForCausalLM"
}

// Validate checks the architecture and that the sizes describe a model.
func (c *Config) Validate() error {
	arch := c.Architecture()
	if !slices.Contains(Architectures, arch) {
		if arch == "" {
			arch = "(none)"
		}
		return fmt.Errorf("%w: %s (supported: %v)", ErrArchitecture, arch, Architectures)
	}
	positive := []struct {
		name string
		v    int
	}{
		{"hidden_size", c.HiddenSize},
		{"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads},
		{"head_dim", c.HeadDim},
		{"vocab_size", c.VocabSize},
		{"max_position_embeddings", c.MaxPositionEmbeddings},
	}
	for _, p := range positive {
		if p.v <= 0 {
			return fmt.Errorf("%w: %s = %d", ErrConfig, p.name, p.v)
		}
	}
	const limit = 1 << 24 // far above any real size; keeps products in range
	for _, p := range positive {
		if p.v > limit {
			return fmt.Errorf("%w: %s = %d is implausibly large", ErrConfig, p.name, p.v)
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("%w: num_attention_heads %d is not a multiple of num_key_value_heads %d",
			ErrConfig, c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("%w: head_dim %d is odd (rotary embedding rotates pairs)", ErrConfig, c.HeadDim)
	}
	if c.RMSNormEps < 0 || c.RopeTheta <= 0 {
		return fmt.Errorf("%w: rms_norm_eps %g, rope_theta %g", ErrConfig, c.RMSNormEps, c.RopeTheta)
	}
	if r := c.RopeScaling; r != nil {
		switch r.Kind() {
		case "linear":
			if r.Factor <= 0 {
				return fmt.Errorf("%w: rope_scaling factor %g", ErrConfig, r.Factor)
			}
		case "llama3":
			if r.Factor <= 0 || r.LowFreqFactor <= 0 || r.HighFreqFactor <= r.LowFreqFactor || r.OriginalMaxPositionEmbeddings <= 0 {
				return fmt.Errorf("%w: llama3 rope_scaling %+v", ErrConfig, *r)
			}
		case "default", "":
		default:
			return fmt.Errorf("%w: rope_scaling type %q (supported: linear, llama3)", ErrConfig, r.Kind())
		}
	}
	return nil
}
