package serve

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// The tests serve the real tiny model (examples/tinylm, imported as
// `model import --hf` does) and a one-shot y = x + 1 model through a real
// engine.

var (
	bundleOnce sync.Once
	bundleDir  string
	chatDir    string
	idsDir     string
	addModel   string
	bundleErr  error
)

// testChatTemplate marks turns with the tokenizer's one special token, so
// the chat path (template, turn end) runs on the tiny model.
const testChatTemplate = "{% for m in messages %}{{ m.role }}: {{ m.content }}{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"

func buildModels(t testing.TB) {
	t.Helper()
	bundleOnce.Do(func() {
		root, err := os.MkdirTemp("", "serve-test-")
		if err != nil {
			bundleErr = err
			return
		}
		src := filepath.Join("..", "..", "examples", "tinylm")
		bundleDir = filepath.Join(root, "tinylm")
		// with the hidden_states output, for /v1/embeddings
		if _, bundleErr = build.ImportHF(context.Background(), src, bundleDir, build.ImportOptions{Options: llama.Options{HiddenStates: true}}); bundleErr != nil {
			return
		}
		// A copy of the checkpoint with a chat template.
		hf := filepath.Join(root, "hf")
		os.MkdirAll(hf, 0o755)
		for _, f := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} {
			if err := os.Symlink(filepath.Join(mustAbs(src), f), filepath.Join(hf, f)); err != nil {
				bundleErr = err
				return
			}
		}
		cfg, _ := json.Marshal(map[string]any{"chat_template": testChatTemplate, "eos_token": "<|endoftext|>"})
		os.WriteFile(filepath.Join(hf, "tokenizer_config.json"), cfg, 0o644)
		chatDir = filepath.Join(root, "tinychat")
		if _, bundleErr = build.ImportHF(context.Background(), hf, chatDir, build.ImportOptions{Name: "tinychat"}); bundleErr != nil {
			return
		}
		// A decoder without a tokenizer: prompts and answers are token ids.
		pcfg, psrc, err := llama.Preset("tiny-test")
		if err != nil {
			bundleErr = err
			return
		}
		idsDir = filepath.Join(root, "tiny-ids")
		if _, bundleErr = build.BuildDecoder(context.Background(), idsDir, build.DecoderSpec{Name: "tiny-ids", Version: "1", Config: pcfg, Weights: psrc}); bundleErr != nil {
			return
		}
		b := onnx.NewBuilder("addone")
		x := b.Input("x", onnx.TensorProto_FLOAT, onnx.Sym("batch"), onnx.Fixed(3))
		one := b.Float32("one", []int64{3}, []float32{1, 1, 1})
		b.Node(onnx.DomainONNX, "Add", []string{x, one}, []string{"y"})
		b.Output("y", onnx.TensorProto_FLOAT, onnx.Sym("batch"), onnx.Fixed(3))
		data, err := b.Marshal()
		if err != nil {
			bundleErr = err
			return
		}
		addModel = filepath.Join(root, "addone.onnx")
		bundleErr = os.WriteFile(addModel, data, 0o644)
	})
	if bundleErr != nil {
		t.Fatal(bundleErr)
	}
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		panic(err)
	}
	return a
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bundleDir != "" {
		os.RemoveAll(filepath.Dir(bundleDir))
	}
	os.Exit(code)
}

// fixture is a served engine.
type fixture struct {
	eng *engine.Engine
	srv *Server
	ts  *httptest.Server
}

func openFixture(t testing.TB, cfg Config) *fixture {
	t.Helper()
	return openFixtureWith(t, cfg, nil)
}

// openFixtureWith is openFixture with the engine's configuration changed
// by edit first.
func openFixtureWith(t testing.TB, cfg Config, edit func(*engine.Config)) *fixture {
	t.Helper()
	orttest.Need(t)
	buildModels(t)
	ecfg := engine.Config{Models: []engine.ModelSpec{{Dir: bundleDir}, {Dir: chatDir}, {Dir: idsDir}, {Dir: addModel}},
		KV: engine.KVOptions{BudgetBytes: 16 << 20, DisablePrefixCache: true}}
	ecfg.Session.IntraOpThreads = 1
	if edit != nil {
		edit(&ecfg)
	}
	eng, err := engine.Open(context.Background(), ecfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(eng, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{eng: eng, srv: srv, ts: httptest.NewServer(srv.Handler())}
	t.Cleanup(func() {
		f.ts.Close()
		srv.Close()
		eng.Close(context.Background())
	})
	return f
}

func (f *fixture) post(t testing.TB, path, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.ts.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

// apiErr decodes an error body.
func apiErr(t testing.TB, data []byte) apiError {
	t.Helper()
	var e struct {
		Error apiError `json:"error"`
	}
	if err := json.Unmarshal(data, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an OpenAI error body: %s", data)
	}
	return e.Error
}

// nodeScript runs script, an ES module, with node against f's server
// (BASE_URL, and env's NAME=value pairs), with the npm packages
// (name@version, from the checkers' cache) linked into its node_modules,
// and returns its combined output. It skips where node is not installed.
func nodeScript(t *testing.T, f *fixture, script string, pkgs []string, env ...string) ([]byte, error) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the checkers written in JavaScript (the openai client, zod, ajv) cannot run")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "node_modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		if err := os.Symlink(npmPackage(t, p), filepath.Join(dir, "node_modules", p[:strings.LastIndexByte(p, '@')])); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "t.mjs"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	// the packages are links into the cache: resolve their imports here
	cmd := exec.Command(node, "--preserve-symlinks", "--preserve-symlinks-main", "t.mjs")
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "BASE_URL="+f.ts.URL+"/v1"), env...)
	return cmd.CombinedOutput()
}
