package engine

import (
	"container/list"
	"fmt"
	"sync"

	"github.com/edgeinfer/edgeinfer/runtime/internal/grammar"
	"github.com/edgeinfer/edgeinfer/runtime/internal/llm"
)

// Constraint restricts what a generation may write (structured output):
// JSONSchema, JSON or Regex builds one, GenerateOptions.Constraint takes
// it. Each step, the tokens the grammar does not allow next are masked
// out of the model's logits before sampling (greedy decoding included),
// and the end token is allowed only where the output is complete; rows of
// constrained and free requests are sampled in the same batch.
//
// JSON is written compactly (no whitespace outside strings). The output
// stays completable within the request's MaxTokens (and the context): as
// the budget runs out, only tokens after which the output can still be
// finished are allowed. A request cut short anyway (a budget smaller than
// the shortest valid output, a stop string, a cancellation) ends with its
// usual finish reason and an incomplete output, as OpenAI's API does.
//
// A Constraint is immutable, safe for concurrent use, and may serve any
// number of requests on any models with a tokenizer: the masks it computes
// for a model's vocabulary are kept with that model version.
type Constraint struct {
	g *grammar.Grammar
}

// String says what the constraint is ("json schema", "json schema or
// text", "json", "regex").
func (c *Constraint) String() string { return c.g.String() }

// constraintError is a constraint the compiler refused; its message names
// the construct (json schema: keyword "patternProperties" is not
// supported).
type constraintError struct{ err error }

func (e *constraintError) Error() string   { return e.err.Error() }
func (e *constraintError) Unwrap() []error { return []error{ErrInvalidRequest, e.err} }

// JSONSchema compiles a JSON Schema (at least what OpenAI's strict mode
// accepts: objects with required properties and additionalProperties
// false, arrays with items and minItems/maxItems, enum, const, anyOf,
// $defs/$ref with recursion, strings with pattern and the formats
// date-time, date, time, uuid, email, hostname, ipv4, ipv6, uri and
// duration, integers and numbers with bounds, booleans, null) to a
// Constraint whose outputs are JSON values the schema accepts. A schema
// it cannot honour is refused with an error wrapping ErrInvalidRequest
// that names the construct. Compiled schemas are kept (by their text), so
// a schema sent with every request is compiled once.
func JSONSchema(schema []byte) (*Constraint, error) {
	return compiled("s\x00"+string(schema), func() (*grammar.Grammar, error) { return grammar.JSONSchema(schema) })
}

// JSONSchemaOrText is JSONSchema or free text: the output is either a
// JSON value the schema accepts, written from its first byte, or text
// whose first character that is not white space is neither '{' nor '['
// (so the first character decides which, and what begins with a brace is
// always complete JSON of the schema when it ends). It is the constraint
// of a model that may answer or call a tool (tool_choice "auto" with the
// calls' schema): text stays free past its first character. A schema it
// cannot honour is refused as JSONSchema refuses it.
func JSONSchemaOrText(schema []byte) (*Constraint, error) {
	return compiled("t\x00"+string(schema), func() (*grammar.Grammar, error) { return grammar.JSONSchemaOrText(schema) })
}

// Frame is the text a model's tool-call format writes around each JSON
// value: Qwen's templates teach "<tool_call>\n" + call + "\n</tool_call>",
// one after another (Sep "\n") for parallel calls. With OrText the output
// may instead be free text that does not begin as a framed value does (its
// first character that is not white space is not Open's first, or with no
// Open neither '{' nor '[').
type Frame struct {
	Open, Close, Sep string
	// Many allows one or more framed values.
	Many, OrText bool
}

// JSONSchemaFramed is JSONSchema with f's text around each value (see
// Frame). A schema it cannot honour is refused as JSONSchema refuses it.
func JSONSchemaFramed(schema []byte, f Frame) (*Constraint, error) {
	key := fmt.Sprintf("f\x00%q\x00%q\x00%q\x00%t\x00%t\x00%s", f.Open, f.Close, f.Sep, f.Many, f.OrText, schema)
	return compiled(key, func() (*grammar.Grammar, error) {
		return grammar.JSONSchemaFramed(schema, grammar.Frame{Open: f.Open, Close: f.Close, Sep: f.Sep, Many: f.Many, OrText: f.OrText})
	})
}

// JSON is the constraint of one JSON object (OpenAI's json_object mode).
func JSON() *Constraint { return jsonConstraint() }

var jsonConstraint = sync.OnceValue(func() *Constraint { return &Constraint{g: grammar.JSON()} })

// Regex compiles a regular expression (RE2 syntax, which ECMAScript
// patterns without lookaround or backreferences also are) that the whole
// output must match. An unsupported construct is refused with an error
// wrapping ErrInvalidRequest.
func Regex(expr string) (*Constraint, error) {
	return compiled("r\x00"+expr, func() (*grammar.Grammar, error) { return grammar.Regex(expr) })
}

// grammarCache keeps the last compiled constraints by their source.
var grammarCache = struct {
	sync.Mutex
	byKey map[string]*list.Element
	order *list.List // of cacheEntry, most recent first
}{byKey: map[string]*list.Element{}, order: list.New()}

type cacheEntry struct {
	key string
	c   *Constraint
	err error
}

const grammarCacheSize = 64

func compiled(key string, compile func() (*grammar.Grammar, error)) (*Constraint, error) {
	gc := &grammarCache
	gc.Lock()
	if el, ok := gc.byKey[key]; ok {
		gc.order.MoveToFront(el)
		e := el.Value.(cacheEntry)
		gc.Unlock()
		return e.c, e.err
	}
	gc.Unlock()
	g, err := compile()
	e := cacheEntry{key: key}
	if err != nil {
		e.err = &constraintError{err}
	} else {
		e.c = &Constraint{g: g}
	}
	gc.Lock()
	defer gc.Unlock()
	if el, ok := gc.byKey[key]; ok { // compiled meanwhile by another caller
		e := el.Value.(cacheEntry)
		return e.c, e.err
	}
	gc.byKey[key] = gc.order.PushFront(e)
	for gc.order.Len() > grammarCacheSize {
		last := gc.order.Back()
		delete(gc.byKey, last.Value.(cacheEntry).key)
		gc.order.Remove(last)
	}
	return e.c, e.err
}

// MaxTopLogProbs bounds GenerateOptions.TopLogProbs (OpenAI's bound).
const MaxTopLogProbs = 20

// constraints is a model version's vocabulary index and the constraints
// compiled over it, with the masks they keep.
type constraints struct {
	once  sync.Once
	vocab *grammar.Vocab
	mu    sync.Mutex
	byG   map[*grammar.Grammar]*list.Element
	order *list.List // of *grammar.TokenGrammar, most recent first
}

// tokenGrammarsKept bounds the constraints a model version keeps masks for.
const tokenGrammarsKept = 32

// tokenGrammar is c over m's vocabulary.
func (m *model) tokenGrammar(c *Constraint) (*grammar.TokenGrammar, error) {
	if m.tok == nil {
		return nil, fmt.Errorf("%w: %q has no tokenizer: a constraint needs one", ErrNoTokenizer, m.name)
	}
	k := &m.cons
	k.once.Do(func() {
		n := m.tok.VocabSize()
		toks := make([][]byte, n)
		for id := range n {
			if m.tok.IsSpecial(id) {
				continue
			}
			toks[id], _ = m.tok.AppendTokenBytes(nil, id, false)
		}
		var ends []int32
		for _, id := range m.gen.EOSTokenIDs {
			ends = append(ends, int32(id))
		}
		if id, ok := m.tok.EOS(); ok {
			ends = append(ends, int32(id))
		}
		if m.info.TurnEnd != "" {
			if id, ok := m.tok.TokenID(m.info.TurnEnd); ok && m.tok.IsSpecial(id) {
				ends = append(ends, int32(id))
			}
		}
		k.vocab = grammar.NewVocab(toks, m.dec.Geometry().Vocab, ends)
		k.byG = map[*grammar.Grammar]*list.Element{}
		k.order = list.New()
	})
	k.mu.Lock()
	defer k.mu.Unlock()
	if el, ok := k.byG[c.g]; ok {
		k.order.MoveToFront(el)
		return el.Value.(*grammar.TokenGrammar), nil
	}
	tg := grammar.NewTokenGrammar(c.g, k.vocab)
	k.byG[c.g] = k.order.PushFront(tg)
	for k.order.Len() > tokenGrammarsKept {
		last := k.order.Back()
		delete(k.byG, last.Value.(*grammar.TokenGrammar).Grammar())
		k.order.Remove(last)
	}
	return tg, nil
}

// decoding is the request's llm.Decoding, or nil when it asks nothing of
// sampling beyond its parameters.
func (s *Stream) decoding(m *model, maxTokens int) (*llm.Decoding, error) {
	o := s.opts
	if o.TopLogProbs < 0 || o.TopLogProbs > MaxTopLogProbs {
		return nil, fmt.Errorf("%w: top log-probabilities %d: want 0 to %d", ErrInvalidRequest, o.TopLogProbs, MaxTopLogProbs)
	}
	if o.Constraint == nil && !o.LogProbs && o.TopLogProbs == 0 {
		return nil, nil
	}
	d := &llm.Decoding{MaxTokens: maxTokens}
	if o.Constraint != nil {
		tg, err := m.tokenGrammar(o.Constraint)
		if err != nil {
			return nil, err
		}
		d.Constraint = tg
	}
	if o.LogProbs || o.TopLogProbs > 0 {
		d.LogProbs, d.TopLogProbs = &llm.LogProbs{}, o.TopLogProbs
	}
	return d, nil
}
