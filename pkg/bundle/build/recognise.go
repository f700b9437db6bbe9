package build

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// GenAIConfigFile is onnxruntime-genai's model description.
const GenAIConfigFile = "genai_config.json"

// genaiConfig is the part of genai_config.json Recognise reads.
type genaiConfig struct {
	Model struct {
		BOSTokenID    json.RawMessage `json:"bos_token_id"`
		EOSTokenID    json.RawMessage `json:"eos_token_id"`
		PadTokenID    json.RawMessage `json:"pad_token_id"`
		ContextLength int             `json:"context_length"`
		Type          string          `json:"type"`
		VocabSize     int             `json:"vocab_size"`
		Decoder       struct {
			Filename          string `json:"filename"`
			HeadSize          int    `json:"head_size"`
			HiddenSize        int    `json:"hidden_size"`
			NumAttentionHeads int    `json:"num_attention_heads"`
			NumHiddenLayers   int    `json:"num_hidden_layers"`
			NumKeyValueHeads  int    `json:"num_key_value_heads"`
		} `json:"decoder"`
	} `json:"model"`
	Search struct {
		Temperature       float64 `json:"temperature"`
		TopK              int     `json:"top_k"`
		TopP              float64 `json:"top_p"`
		RepetitionPenalty float64 `json:"repetition_penalty"`
	} `json:"search"`
}

var pastKeyName = regexp.MustCompile(`^past_key_values\.(\d+)\.key$`)

// Recognise makes a manifest for an exported model in dir: a decoder with
// Optimum/onnxruntime-genai names (input_ids, attention_mask,
// past_key_values.{i}.key/value → logits, present.{i}.key/value) becomes a
// compatible decoder, one with edgeinfer's paged names a paged decoder,
// anything else a oneshot model. The ONNX file is genai_config.json's
// decoder filename when that file exists, else model.onnx. Geometry comes
// from genai_config.json or, without it, from the past/present and logits
// shapes. The caller adds name, version and files (Write hashes them).
func Recognise(dir string) (*bundle.Manifest, error) {
	var gc *genaiConfig
	modelFile := "model.onnx"
	if data, err := os.ReadFile(filepath.Join(dir, GenAIConfigFile)); err == nil {
		gc = new(genaiConfig)
		if err := json.Unmarshal(data, gc); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", bundle.ErrUnrecognised, GenAIConfigFile, err)
		}
		if gc.Model.Decoder.Filename != "" {
			modelFile = gc.Model.Decoder.Filename
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if !bundle.SafePath(modelFile) {
		return nil, fmt.Errorf("%w: model file %q", bundle.ErrUnrecognised, modelFile)
	}
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(modelFile)))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", bundle.ErrUnrecognised, err)
	}
	r, err := onnx.Inspect(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", bundle.ErrUnrecognised, modelFile, err)
	}
	m := &bundle.Manifest{Format: bundle.FormatVersion, Model: modelFile, Kind: bundle.KindOneShot, Quantization: quantization(r)}
	layers := 0
	for _, in := range r.Inputs {
		if sm := pastKeyName.FindStringSubmatch(in.Name); sm != nil {
			n, _ := strconv.Atoi(sm[1])
			layers = max(layers, n+1)
		}
	}
	_, hasIDs := r.Input("input_ids")
	_, hasMask := r.Input("attention_mask")
	logits, hasLogits := r.Output("logits")
	_, hasPool := r.Input("key_cache.0")
	switch {
	case hasIDs && hasMask && hasLogits && layers > 0:
		m.Kind, m.Contract = bundle.KindDecoder, bundle.ContractCompatible
		g := &bundle.Geometry{Layers: layers, Logits: "all"}
		past, _ := r.Input("past_key_values.0.key")
		if len(past.Shape) == 4 {
			g.KVHeads, _ = strconv.Atoi(past.Shape[1])
			g.HeadDim, _ = strconv.Atoi(past.Shape[3])
		}
		if n := len(logits.Shape); n > 0 {
			g.Vocab, _ = strconv.Atoi(logits.Shape[n-1])
		}
		m.Geometry = g
	case hasIDs && hasPool && hasLogits:
		return nil, fmt.Errorf("%w: paged decoders are built by edgeinfer with their manifest", bundle.ErrUnrecognised)
	}
	if m.Kind == bundle.KindDecoder {
		if gc != nil {
			applyGenAI(m, gc)
		} else if err := applyHFConfig(m, dir); err != nil {
			return nil, err
		}
	}
	if m.Kind == bundle.KindDecoder {
		g := m.Geometry
		if g.Heads == 0 {
			g.Heads = g.KVHeads // unknown from I/O alone; GQA ratio is not needed by the compatible adapter
		}
		if g.KVHeads == 0 || g.HeadDim == 0 || g.Vocab == 0 || g.MaxPositions == 0 {
			return nil, fmt.Errorf("%w: decoder geometry incomplete (%+v): add %s", bundle.ErrUnrecognised, *g, GenAIConfigFile)
		}
	}
	return m, nil
}

func applyGenAI(m *bundle.Manifest, gc *genaiConfig) {
	g, d := m.Geometry, gc.Model.Decoder
	setIf := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	setIf(&g.Layers, d.NumHiddenLayers)
	setIf(&g.Heads, d.NumAttentionHeads)
	setIf(&g.KVHeads, d.NumKeyValueHeads)
	setIf(&g.HeadDim, d.HeadSize)
	setIf(&g.Hidden, d.HiddenSize)
	setIf(&g.Vocab, gc.Model.VocabSize)
	setIf(&g.MaxPositions, gc.Model.ContextLength)
	m.Architecture = gc.Model.Type
	gen := &bundle.Generation{
		EOSTokenIDs:       tokenIDs(gc.Model.EOSTokenID),
		Temperature:       gc.Search.Temperature,
		TopK:              gc.Search.TopK,
		TopP:              gc.Search.TopP,
		RepetitionPenalty: gc.Search.RepetitionPenalty,
	}
	if ids := tokenIDs(gc.Model.BOSTokenID); len(ids) > 0 {
		gen.BOSTokenID = &ids[0]
	}
	if ids := tokenIDs(gc.Model.PadTokenID); len(ids) > 0 {
		gen.PadTokenID = &ids[0]
	}
	m.Generation = gen
}

// tokenIDs reads a token id field written as a number or a list.
func tokenIDs(raw json.RawMessage) []int64 {
	var one int64
	if json.Unmarshal(raw, &one) == nil {
		return []int64{one}
	}
	var many []int64
	if json.Unmarshal(raw, &many) == nil {
		return many
	}
	return nil
}

// quantization guesses the weight format from the operators.
func quantization(r *onnx.Report) string {
	switch {
	case r.Ops["com.microsoft.MatMulNBits"] > 0:
		return "int4"
	case r.Ops["MatMulInteger"] > 0 || r.Ops["DynamicQuantizeLinear"] > 0:
		return "int8"
	}
	return "fp32"
}

// applyHFConfig fills geometry gaps from an Optimum export's config.json.
func applyHFConfig(m *bundle.Manifest, dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	var c struct {
		MaxPositions int             `json:"max_position_embeddings"`
		Heads        int             `json:"num_attention_heads"`
		Hidden       int             `json:"hidden_size"`
		ModelType    string          `json:"model_type"`
		BOS          json.RawMessage `json:"bos_token_id"`
		EOS          json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("%w: config.json: %v", bundle.ErrUnrecognised, err)
	}
	g := m.Geometry
	if g.MaxPositions == 0 {
		g.MaxPositions = c.MaxPositions
	}
	if g.Heads == 0 {
		g.Heads = c.Heads
	}
	if g.Hidden == 0 {
		g.Hidden = c.Hidden
	}
	m.Architecture = c.ModelType
	gen := &bundle.Generation{EOSTokenIDs: tokenIDs(c.EOS)}
	if ids := tokenIDs(c.BOS); len(ids) > 0 {
		gen.BOSTokenID = &ids[0]
	}
	m.Generation = gen
	return nil
}
