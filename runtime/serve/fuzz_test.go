package serve

import (
	"errors"
	"net/http"
	"testing"
)

// FuzzTextRequest feeds arbitrary bodies and headers to the request
// decoding: it never panics, and every refusal is a 4xx in OpenAI's
// shape with a message.
func FuzzTextRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stop":["\n"],"edgeinfer":{"class":"batch","ttft_ms":100}}`), true, "ttft=1s")
	f.Add([]byte(`{"model":"m","prompt":[1,2,3],"n":1,"seed":-1}`), false, "")
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"temperature":1e309}`), true, "deadline=x")
	f.Add([]byte(`[1,2]`), false, "")
	f.Fuzz(func(t *testing.T, body []byte, chat bool, slo string) {
		var q textRequest
		err := unmarshalRequest(body, &q)
		if err == nil {
			h := http.Header{}
			h.Set("X-Edgeinfer-SLO", slo)
			_, err = q.validate(chat, h)
		}
		if err == nil {
			return
		}
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status < 400 || ae.Status >= 500 || ae.Message == "" {
			t.Fatalf("%q: %v is not a 4xx API error", body, err)
		}
	})
}

// FuzzInferBody feeds arbitrary .npy bytes and JSON tensors.
func FuzzInferBody(f *testing.F) {
	f.Add([]byte("\x93NUMPY\x01\x00\x10\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }"), "float32", int64(2))
	f.Fuzz(func(t *testing.T, npy []byte, dtype string, dim int64) {
		if dt, a, err := npyInput(npy); err == nil && int64(len(a.Data)) != a.Len()*int64(dt.Size()) {
			t.Fatalf("a .npy of %d bytes parsed as %v of %v", len(a.Data), a.Shape, dt)
		}
		jt := jsonTensor{DType: dtype, Shape: []int64{dim, dim}, Data: []float64{1, 2, 3, 4}}
		if dt, data, err := jt.bytes(); err == nil {
			if _, err := values(dt, data); err != nil {
				t.Fatalf("a tensor built from JSON does not list back: %v", err)
			}
		}
	})
}

// FuzzKeepAlive feeds arbitrary edgeinfer.keep_alive values: the parser
// never panics, refuses with a 400 naming the field, and what it accepts
// is nil, -1 (for good) or a duration ≥ 0 that reads back the same when
// sent as its Go spelling.
func FuzzKeepAlive(f *testing.F) {
	for _, s := range []string{`"5m"`, `300`, `"300"`, `-1`, `0`, `1.5`, `null`, `"1h30m"`, `1e300`, `"-0s"`, `"9223372036s"`, `true`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := parseKeepAlive(raw)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Param == nil || *ae.Param != "edgeinfer.keep_alive" {
				t.Fatalf("%q: %v is not a 400 naming edgeinfer.keep_alive", raw, err)
			}
			return
		}
		if d == nil || *d == -1 {
			return
		}
		if *d < 0 {
			t.Fatalf("%q: negative keep-alive %v other than -1", raw, *d)
		}
		again, err := parseKeepAlive([]byte(`"` + d.String() + `"`))
		if err != nil || again == nil || *again != *d {
			t.Fatalf("%q: %v reads back as %v, %v", raw, *d, again, err)
		}
	})
}
