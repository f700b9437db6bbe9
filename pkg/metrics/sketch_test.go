package metrics

import (
	"encoding/json"
	"testing"
)

func TestSketchRoundTripMerges(t *testing.T) {
	a, b, all := NewHistogram(0), NewHistogram(0), NewHistogram(0)
	for i := 1; i <= 1000; i++ {
		v := float64(i) * 0.37
		all.Record(v)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	// a and b travel as JSON and are merged on the other side
	var merged *Histogram
	for _, h := range []*Histogram{a, b} {
		raw, _ := json.Marshal(h.Sketch())
		var s Sketch
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		got, err := s.Histogram()
		if err != nil {
			t.Fatal(err)
		}
		if merged == nil {
			merged = got
		} else if err := merged.Merge(got); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []float64{0.5, 0.95, 0.99} {
		w, _ := all.Quantile(q)
		g, _ := merged.Quantile(q)
		if w != g {
			t.Errorf("p%v: merged sketches %v, one histogram %v", q*100, g, w)
		}
	}
}

func FuzzSketch(f *testing.F) {
	h := NewHistogram(0)
	h.Record(3)
	h.Record(40)
	raw, _ := json.Marshal(h.Sketch())
	f.Add(raw)
	f.Add([]byte(`{"rel_err":0.5,"offset":-99999999,"counts":[1],"count":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Sketch
		if json.Unmarshal(b, &s) != nil {
			return
		}
		h, err := s.Histogram()
		if err != nil {
			return
		}
		h.Quantile(0.99)
		o := NewHistogram(s.RelErr)
		o.Record(1)
		_ = h.Merge(o)
	})
}
