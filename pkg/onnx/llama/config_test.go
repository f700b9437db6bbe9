package llama

import (
	"errors"
	"testing"
)

func TestParseConfig(t *testing.T) {
	good := `{"architectures":["Qwen2ForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
		"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"rms_norm_eps":1e-6,"max_position_embeddings":512,
		"eos_token_id":[1,2],"bos_token_id":null,"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8192}}`
	c, err := ParseConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if c.HeadDim != 16 || c.RopeTheta != 10000 || !c.QKVBias() || c.OBias() || len(c.EOSTokenID) != 2 || c.BOSTokenID != nil {
		t.Fatalf("config %+v", c)
	}
	tests := []struct {
		name, json string
		want       error
	}{
		{"malformed", `{"hidden_size":`, ErrConfig},
		{"wrong type", `{"architectures":["LlamaForCausalLM"],"hidden_size":"big"}`, ErrConfig},
		{"unknown architecture", `{"architectures":["GPT2LMHeadModel"],"hidden_size":64}`, ErrArchitecture},
		{"no architecture", `{"hidden_size":64}`, ErrArchitecture},
		{"zero layers", `{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":1,"num_attention_heads":4,"vocab_size":8,"max_position_embeddings":8}`, ErrConfig},
		{"heads not divisible", `{"architectures":["LlamaForCausalLM"],"hidden_size":60,"intermediate_size":1,"num_hidden_layers":1,"num_attention_heads":6,"num_key_value_heads":4,"vocab_size":8,"max_position_embeddings":8}`, ErrConfig},
		{"unknown rope scaling", `{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":1,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":8,"max_position_embeddings":8,"rope_scaling":{"type":"yarn","factor":2}}`, ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseConfig([]byte(tt.json)); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestRopeScalingChangesTables(t *testing.T) {
	c, _, _ := Preset("tiny-test")
	base, _ := ropeCache(c, 64)
	lin := *c
	lin.RopeScaling = &RopeScaling{Type: "linear", Factor: 2}
	scaled, _ := ropeCache(&lin, 64)
	// Linear scaling by 2: position 2p scaled equals position p unscaled.
	half := c.HeadDim / 2
	for p := range 32 {
		for i := range half {
			if d := scaled[2*p*half+i] - base[p*half+i]; d > 1e-6 || d < -1e-6 {
				t.Fatalf("position %d dim %d: %g vs %g", p, i, scaled[2*p*half+i], base[p*half+i])
			}
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":256,"max_position_embeddings":64}`))
	f.Add([]byte(`{"eos_token_id":[1,2,3]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if c.NumAttentionHeads%c.NumKeyValueHeads != 0 || c.HeadDim <= 0 || c.HeadDim%2 != 0 {
			t.Fatalf("accepted inconsistent config %+v", c)
		}
	})
}
