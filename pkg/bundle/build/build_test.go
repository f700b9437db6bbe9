package build

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
)

func buildTiny(t *testing.T, contract llama.Contract) *bundle.Bundle {
	t.Helper()
	cfg, src, err := llama.Preset("tiny-test")
	if err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(t.TempDir(), "tokenizer.json")
	os.WriteFile(tok, []byte(`{"model":{"type":"BPE"}}`), 0o644)
	b, err := BuildDecoder(context.Background(), t.TempDir(), DecoderSpec{
		Name: "tiny", Version: "1", Config: cfg, Weights: src, Tokenizer: tok,
		Options: llama.Options{Contract: contract}, CreatedBy: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBuildAndLoad(t *testing.T) {
	b := buildTiny(t, llama.ContractPaged)
	m := b.Manifest
	if m.Kind != bundle.KindDecoder || m.Contract != bundle.ContractPaged || m.Geometry.BlockSize != llama.DefaultBlockSize ||
		m.Geometry.Logits != "last" || m.Tokenizer != TokenizerFile || len(m.Files) != 3 {
		t.Fatalf("manifest %+v geometry %+v", m, m.Geometry)
	}
	if *m.Generation.BOSTokenID != 1 || m.Generation.EOSTokenIDs[0] != 2 {
		t.Errorf("generation %+v", m.Generation)
	}
	data, err := os.ReadFile(b.ModelPath())
	if err != nil {
		t.Fatal(err)
	}
	r, err := onnx.Inspect(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{"input_ids", "position_ids", "block_tables", "context_lens", "last_index", "key_cache.1", "value_cache.0", "slots"} {
		if _, ok := r.Input(in); !ok {
			t.Errorf("paged graph lacks input %s", in)
		}
	}
	for _, out := range []string{"logits"} {
		if _, ok := r.Output(out); !ok {
			t.Errorf("paged graph lacks output %s", out)
		}
	}
}

func TestLoadDetectsTampering(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(dir string)
		want   error
		names  string
	}{
		{"flipped byte", func(dir string) {
			p := filepath.Join(dir, "model.onnx")
			data, _ := os.ReadFile(p)
			data[len(data)/2] ^= 1
			os.WriteFile(p, data, 0o644)
		}, bundle.ErrChecksum, "model.onnx"},
		{"truncated", func(dir string) { os.Truncate(filepath.Join(dir, TokenizerFile), 3) }, bundle.ErrChecksum, TokenizerFile},
		{"missing", func(dir string) { os.Remove(filepath.Join(dir, TokenizerFile)) }, bundle.ErrMissingFile, TokenizerFile},
		{"bad manifest", func(dir string) { os.WriteFile(filepath.Join(dir, bundle.ManifestFile), []byte("{"), 0o644) }, bundle.ErrManifest, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := buildTiny(t, llama.ContractPaged)
			tt.tamper(b.Dir)
			_, err := bundle.Load(b.Dir)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.names) {
				t.Fatalf("err = %v, want %v naming %q", err, tt.want, tt.names)
			}
		})
	}
}

func TestRecogniseCompatible(t *testing.T) {
	b := buildTiny(t, llama.ContractCompatible)
	os.WriteFile(filepath.Join(b.Dir, "config.json"), []byte(`{"max_position_embeddings":512,"num_attention_heads":4,"eos_token_id":[2,3]}`), 0o644)
	m, err := Recognise(b.Dir)
	if err != nil {
		t.Fatal(err)
	}
	g := m.Geometry
	if m.Kind != bundle.KindDecoder || m.Contract != bundle.ContractCompatible || g.Layers != 2 || g.KVHeads != 2 ||
		g.HeadDim != 16 || g.Vocab != 256 || g.MaxPositions != 512 || g.Heads != 4 || len(m.Generation.EOSTokenIDs) != 2 {
		t.Fatalf("manifest %+v geometry %+v", m, g)
	}
	os.Remove(filepath.Join(b.Dir, "config.json"))
	os.WriteFile(filepath.Join(b.Dir, GenAIConfigFile), []byte(`{"model":{"context_length":1024,"eos_token_id":2,"type":"llama",
		"decoder":{"filename":"model.onnx","num_attention_heads":4,"num_key_value_heads":2,"head_size":16,"num_hidden_layers":2}},
		"search":{"temperature":0.7,"top_k":40}}`), 0o644)
	m, err = Recognise(b.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Geometry.MaxPositions != 1024 || m.Generation.TopK != 40 || m.Architecture != "llama" {
		t.Fatalf("genai manifest %+v %+v", m, m.Generation)
	}
	m.Name, m.Version = "x", "1"
	if err := bundle.Write(b.Dir, m, "model.onnx", GenAIConfigFile); err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.Load(b.Dir); err != nil {
		t.Fatal(err)
	}
}

// writeSafetensors writes tensors as one F32 safetensors file.
func writeSafetensors(t *testing.T, path string, tensors map[string]llama.Tensor) {
	t.Helper()
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var data []byte
	for name, ts := range tensors {
		begin := len(data)
		for _, v := range ts.Data {
			data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
		}
		hdr[name] = map[string]any{"dtype": "F32", "shape": ts.Shape, "data_offsets": []int{begin, len(data)}}
	}
	h, _ := json.Marshal(hdr)
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(append(out, h...), data...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// hfCheckpoint writes the tiny preset as a sharded Hugging Face checkpoint.
func hfCheckpoint(t *testing.T, arch string, mutate func(map[string]llama.Tensor)) string {
	t.Helper()
	cfg, src, _ := llama.Preset("tiny-test")
	dir := t.TempDir()
	shards := []map[string]llama.Tensor{{}, {}}
	weightMap := map[string]string{}
	all := map[string]llama.Tensor{}
	for _, ns := range llama.WeightNames(cfg) {
		all[ns.Name], _ = src.Tensor(ns.Name)
	}
	if mutate != nil {
		mutate(all)
	}
	i := 0
	for name, ts := range all {
		shards[i%2][name] = ts
		weightMap[name] = []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i%2]
		i++
	}
	writeSafetensors(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), shards[0])
	writeSafetensors(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), shards[1])
	idx, _ := json.Marshal(map[string]any{"weight_map": weightMap})
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644)
	cfgJSON := `{"architectures":["` + arch + `"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
		"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"rms_norm_eps":1e-5,"max_position_embeddings":512,
		"bos_token_id":1,"eos_token_id":2,"tie_word_embeddings":false}`
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfgJSON), 0o644)
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id":[2,7],"temperature":0.8}`), 0o644)
	os.WriteFile(filepath.Join(dir, TokenizerFile), []byte(`{}`), 0o644)
	return dir
}

func TestImportHF(t *testing.T) {
	dir := hfCheckpoint(t, "LlamaForCausalLM", nil)
	tmpl := "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}"
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"chat_template":`+strconv.Quote(tmpl)+
		`,"bos_token":{"content":"<s>","lstrip":false},"eos_token":"</s>"}`), 0o644)
	b, err := ImportHF(context.Background(), dir, t.TempDir(), ImportOptions{Name: "tiny-hf"})
	if err != nil {
		t.Fatal(err)
	}
	m := b.Manifest
	if m.Name != "tiny-hf" || m.Tokenizer != TokenizerFile || m.Generation.Temperature != 0.8 ||
		len(m.Generation.EOSTokenIDs) != 2 || *m.Generation.BOSTokenID != 1 {
		t.Fatalf("manifest %+v generation %+v", m, m.Generation)
	}
	if m.Chat == nil || *m.Chat != (bundle.Chat{Template: tmpl, BOSToken: "<s>", EOSToken: "</s>"}) {
		t.Fatalf("chat template kept as %+v", m.Chat)
	}
	// The imported graph equals the one built from the same weights directly.
	ref := buildTiny(t, llama.ContractPaged)
	a, _ := os.ReadFile(b.ModelPath())
	c, _ := os.ReadFile(ref.ModelPath())
	ra, _ := onnx.Inspect(a)
	rc, _ := onnx.Inspect(c)
	if ra.Params != rc.Params || ra.Nodes != rc.Nodes {
		t.Fatalf("imported %d params %d nodes, built %d params %d nodes", ra.Params, ra.Nodes, rc.Params, rc.Nodes)
	}
}

func TestImportHFBadInput(t *testing.T) {
	tests := []struct {
		name   string
		arch   string
		mutate func(map[string]llama.Tensor)
		want   error
		names  string
	}{
		{"unknown architecture", "GPT2LMHeadModel", nil, llama.ErrArchitecture, "GPT2LMHeadModel"},
		{"missing tensor", "LlamaForCausalLM", func(m map[string]llama.Tensor) {
			delete(m, "model.layers.1.mlp.up_proj.weight")
		}, llama.ErrMissingTensor, "model.layers.1.mlp.up_proj.weight"},
		{"misshapen tensor", "LlamaForCausalLM", func(m map[string]llama.Tensor) {
			w := m["model.layers.0.self_attn.k_proj.weight"]
			m["model.layers.0.self_attn.k_proj.weight"] = llama.Tensor{Shape: []int{64, 32}, Data: w.Data[:64*32]}
		}, llama.ErrTensorShape, "model.layers.0.self_attn.k_proj.weight"},
		{"qwen2 without biases", "Qwen2ForCausalLM", nil, llama.ErrMissingTensor, "q_proj.bias"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := hfCheckpoint(t, tt.arch, tt.mutate)
			_, err := ImportHF(context.Background(), dir, t.TempDir(), ImportOptions{})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.names) {
				t.Fatalf("err = %v, want %v naming %q", err, tt.want, tt.names)
			}
		})
	}
}

func TestParseChatTemplate(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want *bundle.Chat
		err  string
	}{
		{`{"eos_token":"</s>"}`, nil, ""},
		{`{"chat_template":null}`, nil, ""},
		{`{"chat_template":"T","bos_token":null,"eos_token":"e"}`, &bundle.Chat{Template: "T", EOSToken: "e"}, ""},
		{`{"chat_template":[{"name":"tool_use","template":"A"},{"name":"default","template":"B"}]}`, &bundle.Chat{Template: "B"}, ""},
		{`{"chat_template":[{"name":"rag","template":"A"}]}`, &bundle.Chat{Template: "A"}, ""},
		{`{"chat_template":7}`, nil, "chat_template"},
		{`{"chat_template":"T","bos_token":[1]}`, nil, "bos_token"},
		{`{"chat_template":`, nil, "tokenizer_config.json"},
	} {
		got, err := ParseChatTemplate([]byte(tt.in))
		if tt.err != "" {
			if !errors.Is(err, bundle.ErrManifest) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err %v, want one naming %s", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
			t.Errorf("%s: got %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func FuzzParseManifest(f *testing.F) {
	m := bundle.Manifest{Format: 1, Name: "x", Version: "1", Kind: bundle.KindDecoder, Contract: bundle.ContractPaged, Model: "model.onnx",
		Quantization: "fp32", Files: []bundle.File{{Path: "model.onnx", Size: 1, SHA256: strings.Repeat("a", 64)}},
		Geometry: &bundle.Geometry{Layers: 1, Heads: 2, KVHeads: 1, HeadDim: 4, Vocab: 8, MaxPositions: 16, BlockSize: 16, Logits: "last"}}
	good, _ := m.Marshal()
	if _, err := bundle.ParseManifest(good); err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"format":1,"files":[{"path":"../etc/passwd"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := bundle.ParseManifest(data)
		if err != nil {
			return
		}
		for _, fl := range m.Files {
			if !bundle.SafePath(fl.Path) {
				t.Fatalf("accepted unsafe path %q", fl.Path)
			}
		}
	})
}

// FuzzSafetensorsSource opens arbitrary bytes as a one-file checkpoint:
// the importer's source must reject or read them, never panic, and every
// tensor it reads must hold its shape's element count.
func FuzzSafetensorsSource(f *testing.F) {
	h := []byte(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`)
	good := append(binary.LittleEndian.AppendUint64(nil, uint64(len(h))), h...)
	good = append(good, make([]byte, 8)...)
	f.Add(good)
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		src, err := OpenSafetensors(dir)
		if err != nil {
			return
		}
		defer src.Close()
		for _, name := range src.Names() {
			ts, err := src.Tensor(name)
			if err != nil {
				continue // a dtype the importer does not convert
			}
			n := 1
			for _, d := range ts.Shape {
				n *= d
			}
			if len(ts.Data) != n {
				t.Fatalf("tensor %s: %d values for shape %v", name, len(ts.Data), ts.Shape)
			}
		}
	})
}
