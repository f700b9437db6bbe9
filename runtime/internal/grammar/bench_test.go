package grammar

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

// benchVocab is a 128k vocabulary: Llama 3's (128,256 tokens) from
// platforms/tokenizers/fetch.sh's cache when it is there, else a synthetic
// one of as many byte-level tokens (every byte, then random pieces of
// 2–12 bytes drawn from text, JSON punctuation and UTF-8 characters).
var benchVocab = sync.OnceValues(func() (*Vocab, string) {
	root := os.Getenv("EDGEINFER_TOKENIZERS")
	if root == "" {
		if c, err := os.UserCacheDir(); err == nil {
			root = filepath.Join(c, "edgeinfer", "tokenizers")
		}
	}
	if tok, err := tokenizer.Load(filepath.Join(root, "llama3", "tokenizer.json")); err == nil {
		n := tok.VocabSize()
		toks := make([][]byte, n)
		for id := range n {
			if !tok.IsSpecial(id) {
				toks[id], _ = tok.AppendTokenBytes(nil, id, false)
			}
		}
		return NewVocab(toks, n, []int32{128001, 128009}), fmt.Sprintf("llama3 (%d tokens)", n)
	}
	const n = 128256
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"e", "t", "a", "o", "n", " ", "s", "r", "h", "l", "d", "c", "u", "m", "\"", ":", ",", "{", "}", "[", "]", "0", "1", "2", "9", ".", "-", "_", "é", "日", "\n", "\\", "A", "T"}
	toks := make([][]byte, n)
	for b := range 256 {
		toks[b] = []byte{byte(b)}
	}
	for id := 256; id < n-2; id++ {
		k := 2 + rng.IntN(11)
		var t []byte
		for len(t) < k {
			t = append(t, alphabet[rng.IntN(len(alphabet))]...)
		}
		toks[id] = t
	}
	return NewVocab(toks, n, []int32{n - 1}), fmt.Sprintf("synthetic (%d tokens)", n)
})

// benchSchema is a typical structured-output schema: an object of strings,
// numbers, an enum, a bounded array of objects, a date-time and a nullable.
const benchSchema = `{"type":"object","properties":{"id":{"type":"string","format":"uuid"},"name":{"type":"string"},"price":{"type":"number","minimum":0},` +
	`"qty":{"type":"integer","minimum":0,"maximum":1000},"status":{"type":"string","enum":["ok","late","lost"]},"at":{"type":"string","format":"date-time"},` +
	`"items":{"type":"array","maxItems":5,"items":{"type":"object","properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},"n":{"type":"integer"}},"required":["sku","n"],"additionalProperties":false}},` +
	`"note":{"type":["string","null"]}},"required":["id","name","price","qty","status","at","items","note"],"additionalProperties":false}`

// BenchmarkCompileSchema is the compile time of benchSchema (the grammar;
// masks are computed lazily, per state, by the generations).
func BenchmarkCompileSchema(b *testing.B) {
	for b.Loop() {
		if _, err := JSONSchema([]byte(benchSchema)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMask is the mask's cost per token at batch 1 and 8 on a 128k
// vocabulary: rows following generations of benchSchema (and of plain
// JSON) at the states a sampled generation passes through, masks computed
// for each row of a step, each row then advanced by a token it allows.
// The masks kept per state are warm (a generation's first visits to a
// state are BenchmarkMaskCold's).
func BenchmarkMask(b *testing.B) {
	v, name := benchVocab()
	b.Logf("vocabulary: %s, %d trie nodes", name, v.Nodes())
	for _, g := range []struct {
		name string
		g    *Grammar
	}{{"schema", mustSchema(b, benchSchema)}, {"json", JSON()}} {
		tg := NewTokenGrammar(g.g, v)
		for _, batch := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/b%d", g.name, batch), func(b *testing.B) {
				rows := newRows(tg, batch)
				warm(tg, 64) // visit the states generations visit
				b.ResetTimer()
				for b.Loop() {
					for _, r := range rows {
						r.step()
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch)/1e3, "µs/row")
			})
		}
	}
}

// BenchmarkMaskCold is 200 tokens' masks (about two generations) on a
// fresh TokenGrammar: the first visit of each state walks the vocabulary
// trie once.
func BenchmarkMaskCold(b *testing.B) {
	v, _ := benchVocab()
	g := mustSchema(b, benchSchema)
	tokens := 0
	start := time.Now()
	for b.Loop() {
		r := newRows(NewTokenGrammar(g, v), 1)[0]
		for range 200 {
			r.step()
			tokens++
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(tokens), "µs/token")
}

// row is one sequence of a benchmark step.
type row struct {
	m    *TokenMatcher
	mask []uint64
	rng  *rand.Rand
	n    int
}

func newRows(tg *TokenGrammar, batch int) []*row {
	rows := make([]*row, batch)
	for i := range rows {
		rows[i] = &row{m: tg.NewMatcher(), mask: make([]uint64, (tg.v.size+63)/64), rng: rand.New(rand.NewPCG(uint64(i), 9))}
	}
	return rows
}

// step masks the row and advances it by a random allowed token, the end
// restarting it (a new request of the same schema).
func (r *row) step() {
	n := r.m.Mask(r.mask, 0)
	if n == 0 || r.m.Tokens() > 300 {
		r.m = r.m.tg.NewMatcher()
		return
	}
	// pick the k-th allowed token, a short text token being likelier (as
	// a model's would be): draw among the first allowed words
	k := r.rng.IntN(min(n, 64))
	for w, bits := range r.mask {
		for ; bits != 0; bits &= bits - 1 {
			if k == 0 {
				id := int32(w*64) + int32(trailing(bits))
				r.m.Accept(id)
				if r.m.Ended() {
					r.m = r.m.tg.NewMatcher()
				}
				return
			}
			k--
		}
	}
}

func trailing(x uint64) int {
	n := 0
	for x&1 == 0 {
		x >>= 1
		n++
	}
	return n
}

func warm(tg *TokenGrammar, gens int) {
	r := newRows(tg, 1)[0]
	for range gens * 100 {
		r.step()
	}
}
