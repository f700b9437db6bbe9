package llama

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// Tensor is a float32 weight with its shape (Hugging Face layout: linear
// weights are [out, in]). Data may be a view of memory the source owns (a
// mapped safetensors file): emitters must not modify it.
type Tensor struct {
	Shape []int
	Data  []float32
}

// WeightSource yields weights by Hugging Face tensor name. A missing tensor
// gives an error wrapping ErrMissingTensor. Implementations decide whether
// Tensor converts (F16/BF16 files) or returns views.
type WeightSource interface {
	Tensor(name string) (Tensor, error)
}

// MapSource is an in-memory WeightSource. Safe for concurrent reads.
type MapSource map[string]Tensor

// Tensor returns the named tensor.
func (m MapSource) Tensor(name string) (Tensor, error) {
	t, ok := m[name]
	if !ok {
		return Tensor{}, fmt.Errorf("%w: %s", ErrMissingTensor, name)
	}
	return t, nil
}

// WeightNames lists every tensor a model of config c reads, in build order,
// with its expected shape.
func WeightNames(c *Config) []NamedShape {
	h, kv, d := c.HiddenSize, c.NumKeyValueHeads, c.HeadDim
	q := c.NumAttentionHeads * d
	out := []NamedShape{{"model.embed_tokens.weight", []int{c.VocabSize, h}}}
	for i := range c.NumHiddenLayers {
		p := "model.layers." + strconv.Itoa(i) + "."
		out = append(out,
			NamedShape{p + "input_layernorm.weight", []int{h}},
			NamedShape{p + "self_attn.q_proj.weight", []int{q, h}},
			NamedShape{p + "self_attn.k_proj.weight", []int{kv * d, h}},
			NamedShape{p + "self_attn.v_proj.weight", []int{kv * d, h}})
		if c.QKVBias() {
			out = append(out,
				NamedShape{p + "self_attn.q_proj.bias", []int{q}},
				NamedShape{p + "self_attn.k_proj.bias", []int{kv * d}},
				NamedShape{p + "self_attn.v_proj.bias", []int{kv * d}})
		}
		out = append(out, NamedShape{p + "self_attn.o_proj.weight", []int{h, q}})
		if c.OBias() {
			out = append(out, NamedShape{p + "self_attn.o_proj.bias", []int{h}})
		}
		out = append(out,
			NamedShape{p + "post_attention_layernorm.weight", []int{h}},
			NamedShape{p + "mlp.gate_proj.weight", []int{c.IntermediateSize, h}},
			NamedShape{p + "mlp.up_proj.weight", []int{c.IntermediateSize, h}},
			NamedShape{p + "mlp.down_proj.weight", []int{h, c.IntermediateSize}})
	}
	out = append(out, NamedShape{"model.norm.weight", []int{h}})
	if !c.TieWordEmbeddings {
		out = append(out, NamedShape{"lm_head.weight", []int{c.VocabSize, h}})
	}
	return out
}

// NamedShape is a tensor name and its expected shape.
type NamedShape struct {
	Name  string
	Shape []int
}

// fetch reads a tensor and checks its shape against want.
func fetch(src WeightSource, name string, want ...int) (Tensor, error) {
	t, err := src.Tensor(name)
	if err != nil {
		return Tensor{}, fmt.Errorf("llama: tensor %s: %w", name, err)
	}
	if !slices.Equal(t.Shape, want) {
		return Tensor{}, fmt.Errorf("%w: %s is %v, config wants %v", ErrTensorShape, name, t.Shape, want)
	}
	n := 1
	for _, d := range want {
		n *= d
	}
	if len(t.Data) != n {
		return Tensor{}, fmt.Errorf("%w: %s holds %d values for shape %v", ErrTensorShape, name, len(t.Data), want)
	}
	return t, nil
}

// SyntheticSource generates seeded random weights for config C on demand,
// one tensor at a time, so a large synthetic model never sits in memory.
// Linear weights are N(0, 1/in), which keeps activations at unit scale
// through the layers; embeddings N(0, 1); norm weights 1; biases N(0, 0.02).
// The same Seed and name always give the same tensor, in any order. Safe for
// concurrent use.
type SyntheticSource struct {
	C    *Config
	Seed uint64
}

// Tensor generates the named tensor.
func (s SyntheticSource) Tensor(name string) (Tensor, error) {
	var shape []int
	for _, ns := range WeightNames(s.C) {
		if ns.Name == name {
			shape = ns.Shape
			break
		}
	}
	if shape == nil {
		return Tensor{}, fmt.Errorf("%w: %s", ErrMissingTensor, name)
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	data := make([]float32, n)
	h := fnv.New64a()
	h.Write([]byte(name))
	rng := rand.New(rand.NewPCG(s.Seed, h.Sum64()))
	std := 0.02
	switch {
	case len(shape) == 1 && isNorm(name):
		for i := range data {
			data[i] = 1
		}
		return Tensor{Shape: shape, Data: data}, nil
	case name == "model.embed_tokens.weight":
		std = 1
	case len(shape) == 2:
		std = 1 / math.Sqrt(float64(shape[1]))
	}
	for i := range data {
		data[i] = float32(rng.NormFloat64() * std)
	}
	return Tensor{Shape: shape, Data: data}, nil
}

func isNorm(name string) bool {
	return name == "model.norm.weight" || len(name) > len("layernorm.weight") &&
		name[len(name)-len("layernorm.weight"):] == "layernorm.weight"
}
