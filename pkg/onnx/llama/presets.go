package llama

import (
	"fmt"
	"slices"
)

// ErrUnknownPreset reports a preset name Preset does not know.
var ErrUnknownPreset = fmt.Errorf("%w: unknown preset", ErrOptions)

// PresetSeed is the seed the presets' synthetic weights use.
const PresetSeed = 20240611

var presets = map[string]Config{
	// tiny-test: small enough for unit tests against a pure-Go reference.
	"tiny-test": {
		HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, VocabSize: 256,
		MaxPositionEmbeddings: 512,
	},
	// synthetic-50m: a shape whose streamed weights (19.8 MB in int4, the
	// head most of them) a 32 MiB last-level cache holds, for the
	// comparison with llama.cpp where the weights need not come from DRAM
	// (platforms/llamacpp/compare.sh).
	"synthetic-50m": {
		HiddenSize: 512, IntermediateSize: 1536, NumHiddenLayers: 6,
		NumAttentionHeads: 8, NumKeyValueHeads: 4, HeadDim: 64, VocabSize: 32000,
		MaxPositionEmbeddings: 4096,
	},
	// synthetic-110m: the shape platforms/llamacpp compares the engine and
	// llama.cpp on (platforms/llamacpp/README.md).
	"synthetic-110m": {
		HiddenSize: 768, IntermediateSize: 2048, NumHiddenLayers: 12,
		NumAttentionHeads: 12, NumKeyValueHeads: 4, HeadDim: 64, VocabSize: 32000,
		MaxPositionEmbeddings: 4096,
	},
	"synthetic-1b": {
		HiddenSize: 2048, IntermediateSize: 8192, NumHiddenLayers: 16,
		NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 64, VocabSize: 32000,
		MaxPositionEmbeddings: 4096,
	},
}

// PresetNames lists the synthetic presets, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Preset returns the config of a synthetic preset (a Llama architecture,
// untied, rms_norm_eps 1e-5, rope_theta 10000, bos 1, eos 2) and its
// seeded weight source.
func Preset(name string) (*Config, SyntheticSource, error) {
	p, ok := presets[name]
	if !ok {
		return nil, SyntheticSource{}, fmt.Errorf("%w %q (have %v)", ErrUnknownPreset, name, PresetNames())
	}
	c := p
	c.Architectures = []string{"LlamaForCausalLM"}
	c.ModelType = "llama"
	c.RMSNormEps = 1e-5
	c.RopeTheta = 10000
	c.BOSTokenID = TokenIDs{1}
	c.EOSTokenID = TokenIDs{2}
	c.TorchDtype = "float32"
	return &c, SyntheticSource{C: &c, Seed: PresetSeed}, nil
}
