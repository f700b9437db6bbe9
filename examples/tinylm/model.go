package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/edgeinfer/edgeinfer/pkg/safetensors"
)

// Config holds the config.json keys this Llama needs.
type Config struct {
	Architectures         []string `json:"architectures"`
	VocabSize             int      `json:"vocab_size"`
	HiddenSize            int      `json:"hidden_size"`
	IntermediateSize      int      `json:"intermediate_size"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumKeyValueHeads      int      `json:"num_key_value_heads"`
	HeadDim               int      `json:"head_dim"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	RMSNormEps            float64  `json:"rms_norm_eps"`
	RopeTheta             float64  `json:"rope_theta"`
	TieWordEmbeddings     bool     `json:"tie_word_embeddings"`
	BOSTokenID            int      `json:"bos_token_id"`
	EOSTokenID            int      `json:"eos_token_id"`
}

// shapes lists every tensor a checkpoint of this config must hold, with
// its Hugging Face name and [out, in] shape.
func (c *Config) shapes() map[string][]int {
	h, q, kv := c.HiddenSize, c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	m := map[string][]int{
		"model.embed_tokens.weight": {c.VocabSize, h},
		"model.norm.weight":         {h},
	}
	if !c.TieWordEmbeddings {
		m["lm_head.weight"] = []int{c.VocabSize, h}
	}
	for i := range c.NumHiddenLayers {
		p := "model.layers." + strconv.Itoa(i) + "."
		m[p+"input_layernorm.weight"] = []int{h}
		m[p+"post_attention_layernorm.weight"] = []int{h}
		m[p+"self_attn.q_proj.weight"] = []int{q, h}
		m[p+"self_attn.k_proj.weight"] = []int{kv, h}
		m[p+"self_attn.v_proj.weight"] = []int{kv, h}
		m[p+"self_attn.o_proj.weight"] = []int{h, q}
		m[p+"mlp.gate_proj.weight"] = []int{c.IntermediateSize, h}
		m[p+"mlp.up_proj.weight"] = []int{c.IntermediateSize, h}
		m[p+"mlp.down_proj.weight"] = []int{h, c.IntermediateSize}
	}
	return m
}

// Model is the checkpoint: its config and float32 weights viewing the
// mapped safetensors file. Safe for concurrent use until Close.
type Model struct {
	Config Config
	Params int
	file   *safetensors.File
	w      map[string][]float32
}

// Load reads dir/config.json and maps dir/model.safetensors, checking that
// the file holds exactly the tensors the config implies, with their shapes.
func Load(dir string) (*Model, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	m := &Model{w: map[string][]float32{}}
	if err := json.Unmarshal(raw, &m.Config); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	c := &m.Config
	if len(c.Architectures) != 1 || c.Architectures[0] != "LlamaForCausalLM" || c.NumKeyValueHeads == 0 ||
		c.NumAttentionHeads%c.NumKeyValueHeads != 0 || c.HeadDim%2 != 0 {
		return nil, fmt.Errorf("config.json: not a Llama this example can run: %s", raw)
	}
	if m.file, err = safetensors.Open(filepath.Join(dir, "model.safetensors")); err != nil {
		return nil, err
	}
	want := c.shapes()
	for _, name := range m.file.Names() {
		if _, ok := want[name]; !ok {
			m.file.Close()
			return nil, fmt.Errorf("model.safetensors: unexpected tensor %q", name)
		}
	}
	for name, shape := range want {
		t, err := m.file.Tensor(name)
		if err != nil {
			m.file.Close()
			return nil, err
		}
		if fmt.Sprint(t.Shape) != fmt.Sprint(shape) {
			m.file.Close()
			return nil, fmt.Errorf("model.safetensors: tensor %q has shape %v, config implies %v", name, t.Shape, shape)
		}
		v, err := t.Float32View()
		if err != nil { // F16/BF16 checkpoints, or a misaligned file
			v, err = t.Float32s()
		}
		if err != nil {
			m.file.Close()
			return nil, err
		}
		m.w[name] = v
		m.Params += len(v)
	}
	if c.TieWordEmbeddings {
		m.w["lm_head.weight"] = m.w["model.embed_tokens.weight"]
	}
	return m, nil
}

// Close unmaps the weights.
func (m *Model) Close() error { return m.file.Close() }

// Forward runs ids (positions 0..len-1) through the model and returns the
// logits of every position. It is the plain reference of Hugging Face's
// LlamaForCausalLM: RMSNorm, rotate_half RoPE, grouped-query causal
// attention, SwiGLU; dot products accumulate in float64.
func (m *Model) Forward(ids []int) [][]float32 {
	c := &m.Config
	T, H, D := len(ids), c.HiddenSize, c.HeadDim
	nq, nkv := c.NumAttentionHeads, c.NumKeyValueHeads
	emb := m.w["model.embed_tokens.weight"]
	x := make([][]float32, T)
	for t, id := range ids {
		x[t] = append([]float32(nil), emb[id*H:(id+1)*H]...)
	}
	for l := range c.NumHiddenLayers {
		p := "model.layers." + strconv.Itoa(l) + "."
		q, k, v := make([][]float32, T), make([][]float32, T), make([][]float32, T)
		for t := range T {
			h := rmsNorm(x[t], m.w[p+"input_layernorm.weight"], c.RMSNormEps)
			q[t] = matVec(m.w[p+"self_attn.q_proj.weight"], h)
			k[t] = matVec(m.w[p+"self_attn.k_proj.weight"], h)
			v[t] = matVec(m.w[p+"self_attn.v_proj.weight"], h)
			rope(q[t], t, D, c.RopeTheta)
			rope(k[t], t, D, c.RopeTheta)
		}
		for t := range T {
			a := make([]float32, nq*D)
			for hq := range nq {
				hk := hq / (nq / nkv) // HF repeat_kv: query head hq reads KV head hq / group
				qv := q[t][hq*D : (hq+1)*D]
				scores := make([]float64, t+1)
				maxS := math.Inf(-1)
				for s := range t + 1 {
					scores[s] = dot(qv, k[s][hk*D:(hk+1)*D]) / math.Sqrt(float64(D))
					maxS = max(maxS, scores[s])
				}
				var sum float64
				for s := range scores {
					scores[s] = math.Exp(scores[s] - maxS)
					sum += scores[s]
				}
				for s := range scores {
					w := scores[s] / sum
					for d := range D {
						a[hq*D+d] += float32(w * float64(v[s][hk*D+d]))
					}
				}
			}
			addTo(x[t], matVec(m.w[p+"self_attn.o_proj.weight"], a))
			h := rmsNorm(x[t], m.w[p+"post_attention_layernorm.weight"], c.RMSNormEps)
			g, u := matVec(m.w[p+"mlp.gate_proj.weight"], h), matVec(m.w[p+"mlp.up_proj.weight"], h)
			for i := range g {
				g[i] = g[i] / (1 + float32(math.Exp(-float64(g[i])))) * u[i] // silu(gate) * up
			}
			addTo(x[t], matVec(m.w[p+"mlp.down_proj.weight"], g))
		}
	}
	out := make([][]float32, T)
	for t := range T {
		out[t] = matVec(m.w["lm_head.weight"], rmsNorm(x[t], m.w["model.norm.weight"], c.RMSNormEps))
	}
	return out
}

func rmsNorm(x, w []float32, eps float64) []float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = w[i] * float32(float64(v)*r)
	}
	return out
}

// rope rotates each head of v at position pos, pairing element i with
// i+D/2 (Hugging Face's rotate_half convention).
func rope(v []float32, pos, D int, theta float64) {
	for h := 0; h < len(v); h += D {
		for i := range D / 2 {
			f := float64(pos) / math.Pow(theta, float64(2*i)/float64(D))
			cos, sin := math.Cos(f), math.Sin(f)
			a, b := float64(v[h+i]), float64(v[h+i+D/2])
			v[h+i] = float32(a*cos - b*sin)
			v[h+i+D/2] = float32(b*cos + a*sin)
		}
	}
}

// matVec returns W·x for a row-major [len(W)/len(x), len(x)] matrix.
func matVec(w, x []float32) []float32 {
	n := len(x)
	out := make([]float32, len(w)/n)
	for i := range out {
		out[i] = float32(dot(w[i*n:(i+1)*n], x))
	}
	return out
}

func dot(a, b []float32) float64 {
	var s float64
	for i, v := range a {
		s += float64(v) * float64(b[i])
	}
	return s
}

func addTo(x, y []float32) {
	for i := range x {
		x[i] += y[i]
	}
}
