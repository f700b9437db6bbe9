package serve

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// residentKV is the decoders' KV budget under a memory budget here:
// committed at load, so that the budget's count is resident at once.
var residentKV = engine.KVOptions{BudgetBytes: 16 << 20, Prefault: true, DisablePrefixCache: true}

// threeDecoders serves the three real decoders (tinylm, tinychat,
// tiny-ids) under budget; 0 is no budget.
func threeDecoders(t *testing.T, budget int64) *fixture {
	return openFixtureWith(t, Config{}, func(c *engine.Config) {
		c.Models = []engine.ModelSpec{{Dir: bundleDir}, {Dir: chatDir}, {Dir: idsDir}}
		c.KV, c.MemoryBudgetBytes = residentKV, budget
	})
}

// listed is GET /v1/models by model id.
func (f *fixture) listed(t *testing.T) map[string]modelObject {
	t.Helper()
	resp, err := http.Get(f.ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Data []modelObject }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	out := map[string]modelObject{}
	for _, m := range list.Data {
		out[m.ID] = m
	}
	return out
}

// ask sends model a short request in the way it takes (chat with its
// template, text, token ids), with extra in the edgeinfer object.
func (f *fixture) ask(t *testing.T, model, extra string) (*http.Response, []byte) {
	t.Helper()
	ext := `"edgeinfer":{` + extra + `}`
	switch model {
	case "tinychat":
		return f.post(t, "/v1/chat/completions", `{"model":"tinychat","max_tokens":4,"messages":[{"role":"user","content":"Call me Ishmael"}],`+ext+`}`)
	case "tiny-ids":
		return f.post(t, "/v1/completions", `{"model":"tiny-ids","max_tokens":4,"prompt":[5,6,7,8],`+ext+`}`)
	}
	return f.post(t, "/v1/completions", `{"model":"`+model+`","max_tokens":4,"prompt":"Call me Ishmael",`+ext+`}`)
}

// TestBudgetServesThreeOfTwo is the command that must work: three models
// configured, a memory budget that fits two; requests alternate among
// them and all succeed, each one that loaded its model says how long that
// took (X-Edgeinfer-Load-Ms), and /v1/models lists the three with two
// loaded.
func TestBudgetServesThreeOfTwo(t *testing.T) {
	// What the engine counts for each (its listing), once the process has
	// run them: the first sessions of a process leave ONNX Runtime's
	// process-wide state behind, which would be counted in the first one
	// measured.
	warm := threeDecoders(t, 0)
	for _, m := range []string{"tinylm", "tinychat", "tiny-ids"} {
		warm.ask(t, m, "")
	}
	var sizes []int64
	for _, m := range threeDecoders(t, 1<<40).listed(t) {
		sizes = append(sizes, m.Bytes)
	}
	if len(sizes) != 3 {
		t.Fatalf("%d models listed, want 3", len(sizes))
	}
	var total, least int64 = 0, math.MaxInt64
	for _, b := range sizes {
		total, least = total+b, min(least, b)
	}
	// Any two fit, never the three. The counts come from another engine,
	// and a count is the larger of the manifest's estimate and the RSS a
	// load was measured to move, which varies between engines on a loaded
	// machine: a margin of a quarter of the smallest keeps the premise
	// (it went red once under stress-ng with a margin of a half).
	budget := total - least*3/4
	f := threeDecoders(t, budget)
	loadsBefore := f.eng.Stats().Residency.Loads
	models := []string{"tinylm", "tinychat", "tiny-ids"}
	loaded := 0
	for i := range 12 {
		name := models[i%3]
		resp, data := f.ask(t, name, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d (%s): %d %s", i, name, resp.StatusCode, data)
		}
		if resp.Header.Get("X-Edgeinfer-Load-Ms") != "" {
			loaded++
		}
		up, used := 0, int64(0)
		for _, m := range f.listed(t) {
			if m.Loaded {
				up, used = up+1, used+m.Bytes
			}
		}
		// Never three. A loaded version is counted at the RSS its load was
		// measured to move, which work beside it inflates (under
		// stress-ng two counted 0.6 MB over a budget they fit by
		// estimate): the count may pass the budget by the premise's
		// margin, and the next load evicts by it. TestBudgetRSS bounds
		// the real resident set.
		if up > 2 || used > budget+least/4 {
			t.Fatalf("after request %d: %d models loaded, %d bytes counted, under a budget of %d for two", i, up, used, budget)
		}
	}
	st := f.eng.Stats().Residency
	if onDemand := int(st.Loads - loadsBefore); loaded != onDemand || loaded < 9 || st.Evictions == 0 || st.UsedBytes > budget+least/4 {
		t.Fatalf("%d responses with a load time, %d loads on demand (want one per request after the first two): %+v", loaded, onDemand, st)
	}
	t.Logf("budget %.1f MiB for models of %v bytes: 12 requests, %d loads on demand; %.0f ms loading in all (Open's 2 included), %d unloaded for room",
		float64(budget)/(1<<20), sizes, loaded, st.LoadTime.Seconds()*1000, st.Evictions)
}

// TestKeepAliveField: edgeinfer.keep_alive sets how long the model stays
// (its expiry in /v1/models), a negative one keeps it for good, and a bad
// one is a 400 naming the field.
func TestKeepAliveField(t *testing.T) {
	f := threeDecoders(t, 1<<40)
	start := time.Now()
	if resp, data := f.ask(t, "tinylm", `"keep_alive":"10m"`); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	m := f.listed(t)["tinylm"]
	if at := time.Unix(m.ExpiresAt, 0); !m.Loaded || at.Before(start.Add(10*time.Minute-time.Second)) || at.After(time.Now().Add(10*time.Minute+time.Second)) {
		t.Fatalf("after keep_alive 10m: %+v (expires %v, sent at %v)", m, at, start)
	}
	if resp, data := f.ask(t, "tinylm", `"keep_alive":-1`); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	if m := f.listed(t)["tinylm"]; !m.Loaded || m.ExpiresAt != 0 {
		t.Fatalf("after keep_alive -1: %+v", m)
	}
	for _, bad := range []string{`"forever"`, `"5 minutes"`, `true`, `1e300`} {
		resp, data := f.ask(t, "tinylm", `"keep_alive":`+bad)
		if e := apiErr(t, data); resp.StatusCode != http.StatusBadRequest || e.Param == nil || *e.Param != "edgeinfer.keep_alive" {
			t.Errorf("keep_alive %s: %d %s", bad, resp.StatusCode, data)
		}
	}
}

// TestModelTooBig: a model of the store bigger than the budget is a 507
// naming the model, its size and the budget; nothing is loaded.
func TestModelTooBig(t *testing.T) {
	buildModels(t)
	path := t.TempDir() + "/models.db"
	st, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Import(context.Background(), idsDir, nil); err != nil {
		t.Fatal(err)
	}
	st.Close()
	f := openFixtureWith(t, Config{}, func(c *engine.Config) {
		c.Models, c.Store, c.KV, c.MemoryBudgetBytes = nil, path, residentKV, 8<<20
	})
	if m, ok := f.listed(t)["tiny-ids"]; !ok || m.Loaded || m.Bytes <= 8<<20 {
		t.Fatalf("the store's model listed as %+v (listed %v)", m, ok)
	}
	resp, data := f.ask(t, "tiny-ids", "")
	e := apiErr(t, data)
	if resp.StatusCode != http.StatusInsufficientStorage || e.Code == nil || *e.Code != "model_too_large" ||
		!strings.Contains(e.Message, "tiny-ids") || !strings.Contains(e.Message, "8.0 MiB") {
		t.Fatalf("%d %s", resp.StatusCode, data)
	}
	if resp, _ := f.ask(t, "absent", ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a model in no store: %d", resp.StatusCode)
	}
}

func deref(d *time.Duration) string {
	if d == nil {
		return "nil"
	}
	return d.String()
}

func TestParseKeepAlive(t *testing.T) {
	for in, want := range map[string]time.Duration{
		`"30s"`: 30 * time.Second, `"5m"`: 5 * time.Minute, `300`: 5 * time.Minute, `"300"`: 5 * time.Minute,
		`0`: 0, `"0"`: 0, `-1`: -1, `"-1m"`: -1, `1.5`: 1500 * time.Millisecond,
	} {
		got, err := parseKeepAlive(json.RawMessage(in))
		if err != nil || got == nil || *got != want {
			t.Errorf("%s: %v, %v; want %v", in, deref(got), err, want)
		}
	}
	for _, in := range []string{``, `null`} {
		if got, err := parseKeepAlive(json.RawMessage(in)); got != nil || err != nil {
			t.Errorf("%q: %v %v, want nil", in, got, err)
		}
	}
}
