package serve

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// embeddingsFields are the fields /v1/embeddings reads; any other is
// refused, naming it, rather than ignored.
var embeddingsFields = []string{"model", "input", "encoding_format", "dimensions", "user", "edgeinfer"}

type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"` // accepted and ignored, as it changes nothing
	Edgeinfer      *embedExtension `json:"edgeinfer"`
}

// embedExtension is the edgeinfer object of an embeddings request: the
// priority fields of the other endpoints, the pooling ("mean", "last",
// "first"/"cls"; default the model's) and normalize (default true).
type embedExtension struct {
	extension
	Pooling   string `json:"pooling"`
	Normalize *bool  `json:"normalize"`
}

type embeddingData struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

// embeddings serves POST /v1/embeddings as OpenAI does: input a string, an
// array of strings, an array of token ids or an array of arrays of them;
// encoding_format "float" (default) or "base64" (little-endian float32
// bytes); dimensions only where it is the model's own size.
func (s *Server) embeddings(w *responseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, errorOf(decodeJSON(errReader{err}, nil)))
		return
	}
	var fields map[string]json.RawMessage
	if err := unmarshalRequest(body, &fields); err != nil {
		writeError(w, errorOf(err))
		return
	}
	for name := range fields {
		if !slices.Contains(embeddingsFields, name) {
			writeError(w, withCode(badRequest(name, "not supported by /v1/embeddings (it reads %s)", strings.Join(embeddingsFields, ", ")), "unsupported_parameter"))
			return
		}
	}
	var q embeddingsRequest
	if err := unmarshalRequest(body, &q); err != nil {
		writeError(w, errorOf(err))
		return
	}
	if q.Model == "" {
		writeError(w, badRequest("model", "required: the name of a model from GET /v1/models"))
		return
	}
	m, release, aerr := s.hold(r.Context(), w, q.Model, "", nil)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	defer release()
	w.model = m.Name
	inputs, aerr := embedInputs(q.Input)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	format := q.EncodingFormat
	switch format {
	case "":
		format = "float"
	case "float", "base64":
	default:
		writeError(w, badRequest("encoding_format", "%q: want \"float\" or \"base64\"", format))
		return
	}
	opts := engine.EmbedOptions{}
	if q.Dimensions != nil {
		if *q.Dimensions <= 0 || *q.Dimensions != m.Embeddings {
			writeError(w, withCode(badRequest("dimensions", "%d: %s gives vectors of %d dimensions and does not support shortening them (omit dimensions, or send %d)", *q.Dimensions, m.Name, m.Embeddings, m.Embeddings), "unsupported_value"))
			return
		}
		opts.Dimensions = *q.Dimensions
	}
	v := &validated{}
	var ext *extension
	if x := q.Edgeinfer; x != nil {
		ext = &x.extension
		if opts.Pooling, err = engine.ParsePooling(x.Pooling); err != nil {
			writeError(w, badRequest("edgeinfer.pooling", "%q: want mean, last, first or cls", x.Pooling))
			return
		}
		opts.Unnormalized = x.Normalize != nil && !*x.Normalize
	}
	if err := v.priority(ext, r.Header); err != nil {
		writeError(w, errorOf(err))
		return
	}
	opts.Class, opts.SLO, opts.FailFast, opts.KeepAlive = v.class, v.slo, v.failFast, v.keepAlive
	vecs, usage, err := s.e.Embed(r.Context(), m.Name, inputs, opts)
	if err != nil {
		writeError(w, embedError(err))
		return
	}
	data := make([]embeddingData, len(vecs))
	for i, vec := range vecs {
		data[i] = embeddingData{Object: "embedding", Index: i, Embedding: vec}
		if format == "base64" {
			data[i].Embedding = base64.StdEncoding.EncodeToString(float32Bytes(vec))
		}
	}
	w.generated, w.promptTokens = true, usage.PromptTokens
	release()
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": data, "model": m.Name,
		"usage": map[string]int{"prompt_tokens": usage.PromptTokens, "total_tokens": usage.PromptTokens},
	})
}

// embedError names the input at fault in a refused input.
func embedError(err error) *apiError {
	if ie, ok := errors.AsType[*engine.InputError](err); ok {
		param := fmt.Sprintf("input[%d]", ie.Index)
		if ie.Tokens == 0 {
			return badRequest(param, "empty: every input needs at least one token")
		}
		return withCode(badRequest(param, "%d tokens, over the model's context of %d: shorten it or split it", ie.Tokens, ie.Context), "context_length_exceeded")
	}
	if errors.Is(err, engine.ErrInvalidRequest) && strings.Contains(err.Error(), "hidden_states") {
		return withCode(badRequest("model", "%v", err), "model_kind")
	}
	return errorOf(err)
}

// embedInputs reads OpenAI's four shapes of input.
func embedInputs(raw json.RawMessage) ([]engine.EmbedInput, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("input", "required: a string, an array of strings, an array of token ids or an array of arrays of token ids")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		if text == "" {
			return nil, badRequest("input", "empty: send some text")
		}
		return []engine.EmbedInput{{Text: text}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, withCode(badRequest("input", "want a string or an array, got %s", jsonKindOf(raw)), "invalid_type")
	}
	if len(items) == 0 {
		return nil, badRequest("input", "empty array: send at least one input")
	}
	var ids []int32
	if tokenIDs(raw, &ids) == nil {
		return []engine.EmbedInput{{Tokens: ids}}, nil
	}
	out := make([]engine.EmbedInput, len(items))
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		var s string
		var ids []int32
		switch {
		case json.Unmarshal(it, &s) == nil:
			if s == "" {
				return nil, badRequest(param, "empty: every input needs some text")
			}
			out[i].Text = s
		case tokenIDs(it, &ids) == nil:
			if len(ids) == 0 {
				return nil, badRequest(param, "empty: every input needs at least one token")
			}
			out[i].Tokens = ids
		default:
			return nil, withCode(badRequest(param, "want a string or an array of token ids, got %s", jsonKindOf(it)), "invalid_type")
		}
	}
	return out, nil
}

// tokenIDs reads an array of integers that fit int32.
func tokenIDs(raw json.RawMessage, ids *[]int32) error {
	var xs []float64
	if err := json.Unmarshal(raw, &xs); err != nil {
		return err
	}
	out := make([]int32, len(xs))
	for i, x := range xs {
		if x != math.Trunc(x) || x < math.MinInt32 || x > math.MaxInt32 {
			return fmt.Errorf("token %d: %v is not a token id", i, x)
		}
		out[i] = int32(x)
	}
	*ids = out
	return nil
}

func jsonKindOf(raw json.RawMessage) string {
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// float32Bytes is v as little-endian float32 bytes (OpenAI's base64).
func float32Bytes(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}
