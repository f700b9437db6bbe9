package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/internal/grammar/grammartest"
)

// constrainSchemas are the schemas the engine's tests generate from on
// the tiny model: OpenAI strict-mode objects, arrays with bounds, enums,
// nullable and bounded numbers, recursion through $defs, formats and
// patterns, anyOf.
var constrainSchemas = []string{
	`{"type":"object","properties":{"lot":{"type":"string"},"count":{"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991},"ok":{"type":"boolean"}},"required":["lot","count","ok"],"additionalProperties":false}`,
	`{"type":"object","properties":{"name":{"type":"string","maxLength":16},"tags":{"type":"array","items":{"type":"string","enum":["red","green","blue"]},"minItems":1,"maxItems":3},"score":{"type":["number","null"],"minimum":0,"maximum":100}},"required":["name","tags","score"],"additionalProperties":false}`,
	`{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":99},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v","kids"],"additionalProperties":false}},"$ref":"#/$defs/node"}`,
	`{"type":"object","properties":{"when":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"},"mail":{"type":"string","format":"email"},"code":{"type":"string","pattern":"^[A-Z]{3}-\\d{2,4}$"}},"required":["when","id","mail","code"],"additionalProperties":false}`,
	`{"anyOf":[{"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number","exclusiveMinimum":0}},"required":["kind","r"],"additionalProperties":false},{"type":"object","properties":{"kind":{"const":"rect"},"w":{"type":"integer","minimum":1},"h":{"type":"integer","minimum":1}},"required":["kind","w","h"],"additionalProperties":false}]}`,
}

// Constrained generation on the real tiny model, sampled at temperature 1
// with a seed each, batched eight at a time: every output parses and
// validates against its schema (checked by grammartest, not by the
// compiler), within max_tokens.
func TestConstrainedOutputsValidate(t *testing.T) {
	e := openText(t)
	per := 40 // 5 schemas × 40 = 200 outputs
	if testing.Short() {
		per = 8
	}
	checkConstrained(t, per, func(ctx context.Context, seed uint64, opts GenerateOptions) *Stream {
		return e.Chat(ctx, "tinychat", []ChatMessage{{Role: "user", Content: fmt.Sprintf("Item %d", seed)}}, opts)
	})
}

// checkConstrained generates per outputs of each of constrainSchemas
// through gen, eight at a time, sampled at temperature 1 with a seed each,
// and fails unless every one finishes with stop, parses and validates.
func checkConstrained(t *testing.T, per int, gen func(ctx context.Context, seed uint64, opts GenerateOptions) *Stream) {
	t.Helper()
	type job struct {
		schema int
		seed   uint64
	}
	jobs := make(chan job)
	var mu sync.Mutex
	finishes := map[FinishReason]int{}
	var fails []string
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for j := range jobs {
				c, err := JSONSchema([]byte(constrainSchemas[j.schema]))
				if err != nil {
					t.Error(err)
					continue
				}
				text, sum, err := drain(gen(context.Background(), j.seed, GenerateOptions{MaxTokens: 160, Constraint: c, Sampling: &Sampling{Temperature: 1, Seed: j.seed}}))
				mu.Lock()
				finishes[sum.Finish]++
				var v any
				switch {
				case err != nil:
					fails = append(fails, err.Error())
				case sum.Finish != FinishStop: // 160 tokens leave room for every schema's output
					fails = append(fails, fmt.Sprintf("schema %d seed %d: finished %s: %s", j.schema, j.seed, sum.Finish, text))
				case json.Unmarshal([]byte(text), &v) != nil:
					fails = append(fails, fmt.Sprintf("schema %d seed %d (%s): not JSON: %s", j.schema, j.seed, sum.Finish, text))
				default:
					if err := grammartest.Validate([]byte(constrainSchemas[j.schema]), []byte(text)); err != nil {
						fails = append(fails, fmt.Sprintf("schema %d seed %d: %v: %s", j.schema, j.seed, err, text))
					}
				}
				mu.Unlock()
			}
		})
	}
	n := 0
	for s := range constrainSchemas {
		for i := range per {
			jobs <- job{s, uint64(1000*s + i)}
			n++
		}
	}
	close(jobs)
	wg.Wait()
	if len(fails) > 0 {
		t.Fatalf("%d of %d outputs invalid:\n%s", len(fails), n, strings.Join(fails, "\n"))
	}
	t.Logf("%d constrained outputs, all valid; finishes %v", n, finishes)
}

// A constraint and free requests share batches: the free ones' greedy
// output is what it is alone, and a regex constraint is matched whole.
func TestConstrainedBatchesWithFree(t *testing.T) {
	e := openText(t)
	ctx := context.Background()
	greedy := GenerateOptions{MaxTokens: 30, Sampling: &Sampling{}}
	alone, _, err := drain(e.Generate(ctx, "tinylm", "Call me Ishmael", greedy))
	if err != nil {
		t.Fatal(err)
	}
	re, err := Regex(`[0-9]{3}-[a-z]{2,4}( [A-Z][a-z]+)?`)
	if err != nil {
		t.Fatal(err)
	}
	full := regexp.MustCompile(`^[0-9]{3}-[a-z]{2,4}( [A-Z][a-z]+)?$`)
	var wg sync.WaitGroup
	texts := make([]string, 6)
	errs := make([]error, 6)
	for i := range texts {
		wg.Go(func() {
			opts := GenerateOptions{MaxTokens: 30, Sampling: &Sampling{Temperature: 1, Seed: uint64(i)}, Constraint: re}
			if i%2 == 0 {
				opts = greedy
			}
			texts[i], _, errs[i] = drain(e.Generate(ctx, "tinylm", "Call me Ishmael", opts))
		})
	}
	wg.Wait()
	for i, text := range texts {
		switch {
		case errs[i] != nil:
			t.Fatal(errs[i])
		case i%2 == 0 && text != alone:
			t.Errorf("free stream %d changed beside constrained ones: %q, alone %q", i, text, alone)
		case i%2 == 1 && !full.MatchString(text):
			t.Errorf("regex stream %d: %q", i, text)
		}
	}
}

// A constrained sequence preempted and resumed rebuilds its constraint
// from the tokens it generated: seeded outputs are the same as without
// preemption, and valid.
func TestConstrainedPreemption(t *testing.T) {
	e := openText(t)
	dirs, _ := tinyText()
	c, err := JSONSchema([]byte(constrainSchemas[1]))
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	opts := func(i int) GenerateOptions {
		return GenerateOptions{MaxTokens: 60, Constraint: c, Sampling: &Sampling{Temperature: 1, Seed: uint64(i)}}
	}
	prompt := func(i int) string { return strings.Repeat("whale ", 20) + fmt.Sprint(i) }
	alone := make([]string, n)
	for i := range n {
		alone[i], _, _ = drain(e.Generate(context.Background(), "tinylm", prompt(i), opts(i)))
	}
	block := blockBytes(e)
	cfg := Config{Models: []ModelSpec{{Dir: dirs[0]}}, KV: KVOptions{BudgetBytes: 2 * block * ((30+60)/16 + 1), DisablePrefixCache: true},
		Scheduler: SchedulerConfig{ChunkSize: 32, AdmitReserve: 1}}
	cfg.Session.IntraOpThreads = 1
	small, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close(context.Background())
	for try := 1; small.Stats().Scheduler.Preemptions == 0; try++ {
		if try > 5 {
			t.Fatalf("no preemption in %d tries", try-1)
		}
		got := make([]string, n)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-gate
				var err error
				if got[i], _, err = drain(small.Generate(context.Background(), "tinylm", prompt(i), opts(i))); err != nil {
					t.Error(err)
				}
			})
		}
		close(gate)
		wg.Wait()
		for i := range n {
			if got[i] != alone[i] {
				t.Fatalf("stream %d changed under preemption:\n got %s\nwant %s", i, got[i], alone[i])
			}
			if err := grammartest.Validate([]byte(constrainSchemas[1]), []byte(got[i])); err != nil {
				t.Fatalf("stream %d: %v: %s", i, err, got[i])
			}
		}
	}
}

// A schema the compiler cannot honour is refused before generation,
// naming the construct; a constraint needs a tokenizer.
func TestConstraintRefusals(t *testing.T) {
	_, err := JSONSchema([]byte(`{"type":"object","patternProperties":{"^x":{"type":"string"}}}`))
	if !errors.Is(err, ErrInvalidRequest) || err.Error() != `json schema: keyword "patternProperties" is not supported` {
		t.Fatalf("patternProperties: %v", err)
	}
	if _, err := Regex(`(a)\1`); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("backreference: %v", err)
	}
	e, _ := openTiny(t, Config{})
	_, sum, err := drain(e.GenerateTokens(context.Background(), "tiny-test", ids(5, 0), GenerateOptions{Constraint: JSON()}))
	if !errors.Is(err, ErrNoTokenizer) || sum.Finish != FinishRejected {
		t.Fatalf("no tokenizer: %v %+v", err, sum)
	}
	_, _, err = drain(e.GenerateTokens(context.Background(), "tiny-test", ids(5, 0), GenerateOptions{TopLogProbs: 21}))
	if !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("21 top log-probabilities: %v", err)
	}
}

// Log-probabilities are of the distribution sampled from, after the
// constraint's mask: greedy tokens are their distribution's most likely,
// and the alternatives are sorted and allowed (fewer than asked where the
// constraint allows fewer).
func TestLogProbs(t *testing.T) {
	e := openText(t)
	ctx := context.Background()
	for _, opts := range []GenerateOptions{
		{MaxTokens: 20, Sampling: &Sampling{}, LogProbs: true, TopLogProbs: 3},
		{MaxTokens: 40, Sampling: &Sampling{}, TopLogProbs: 5, Constraint: JSON()},
		{MaxTokens: 20, Sampling: &Sampling{Temperature: 0.7, Seed: 3}, LogProbs: true},
	} {
		var text strings.Builder
		n := 0
		for tok, err := range e.Generate(ctx, "tinylm", "Call me Ishmael", opts).Tokens() {
			if err != nil {
				t.Fatal(err)
			}
			n++
			text.WriteString(tok.Text)
			if tok.LogProb > 0 || math.IsNaN(float64(tok.LogProb)) || len(tok.Bytes) == 0 || len(tok.Top) > opts.TopLogProbs || opts.TopLogProbs > 0 && len(tok.Top) == 0 {
				t.Fatalf("token %d: %+v", tok.Index, tok)
			}
			for i, x := range tok.Top {
				if math.IsInf(float64(x.LogProb), -1) || i > 0 && x.LogProb > tok.Top[i-1].LogProb {
					t.Fatalf("token %d: alternatives %+v", tok.Index, tok.Top)
				}
			}
			if opts.Sampling.Temperature == 0 && len(tok.Top) > 0 && (tok.Top[0].ID != tok.ID || tok.Top[0].LogProb != tok.LogProb) {
				t.Fatalf("greedy token %d (%d, %g) is not its distribution's first %+v", tok.Index, tok.ID, tok.LogProb, tok.Top[0])
			}
		}
		if n == 0 {
			t.Fatal("no tokens")
		}
		if opts.Constraint != nil && !json.Valid([]byte(text.String())) {
			t.Fatalf("json: %s", text.String())
		}
	}
}

// A constrained request runs through chunked prefill (a prompt of several
// chunks) and stops at a stop string like any other (the JSON is then cut
// there, finish stop_string).
func TestConstrainedChunksAndStop(t *testing.T) {
	dirs, err := tinyText()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Models: []ModelSpec{{Dir: dirs[0]}}, Scheduler: SchedulerConfig{ChunkSize: 16}}
	cfg.Session.IntraOpThreads = 1
	e, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	c, err := JSONSchema([]byte(constrainSchemas[0]))
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("Call me Ishmael. ", 12) // about 60 tokens: four chunks
	text, sum, err := drain(e.Generate(context.Background(), "tinylm", long, GenerateOptions{MaxTokens: 80, Constraint: c, Sampling: &Sampling{Temperature: 1, Seed: 5}}))
	if err != nil || sum.PromptTokens <= 16 || grammartest.Validate([]byte(constrainSchemas[0]), []byte(text)) != nil {
		t.Fatalf("chunked prompt: %v, %d prompt tokens, %s", err, sum.PromptTokens, text)
	}
	text, sum, err = drain(e.Generate(context.Background(), "tinylm", long, GenerateOptions{MaxTokens: 80, Constraint: c, Stop: []string{`"count"`}, Sampling: &Sampling{Temperature: 1, Seed: 5}}))
	if err != nil || sum.Finish != FinishStopString || !strings.HasPrefix(text, `{"lot":"`) || strings.Contains(text, "count") {
		t.Fatalf("stop string: %v, %s, %q", err, sum.Finish, text)
	}
}
