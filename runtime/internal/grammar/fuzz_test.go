package grammar

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The schema compiler takes untrusted input (any HTTP client's
// response_format): whatever it is given, it refuses or compiles without
// panicking, and what it compiles generates JSON it matches itself.
func FuzzJSONSchema(f *testing.F) {
	for _, s := range testSchemas {
		f.Add([]byte(s))
	}
	for _, s := range []string{`{}`, `true`, `{"type":["string","null"],"maxLength":3}`, `{"$ref":"#"}`,
		`{"type":"array","items":{"$ref":"#"}}`, `{"anyOf":[{"$ref":"#/anyOf/1"},{"type":"integer","minimum":-3.5,"maximum":1e300}]}`,
		`{"type":"string","pattern":"^(a|b)*c{1,3}$","minLength":2}`, `{"enum":[{"a":[1,"\u0000"]},null,1.5e3]}`,
		`{"type":"number","exclusiveMaximum":0,"minimum":-1}`, `{"properties":{"a~/b":{"$ref":"#/properties/a~0~1b"}}}`} {
		f.Add([]byte(s))
	}
	v, toks := testVocab()
	f.Fuzz(func(t *testing.T, schema []byte) {
		watchdog := time.AfterFunc(5*time.Second, func() { panic(fmt.Sprintf("compiling and sampling %q took over 5 s", schema)) })
		defer watchdog.Stop()
		g, err := JSONSchema(schema)
		if err != nil {
			return
		}
		tg := NewTokenGrammar(g, v)
		rng := rand.New(rand.NewPCG(uint64(len(schema)), 1))
		for range 3 {
			s, _ := sample(t, tg, rng, 64, toks)
			if g.Match(s) && !json.Valid([]byte(s)) {
				t.Fatalf("%s generated invalid JSON %q", schema, s)
			}
		}
	})
}
