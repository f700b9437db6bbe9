package llm

import (
	"strings"
	"testing"
)

func TestStopMatcherAcrossFragments(t *testing.T) {
	cases := []struct {
		stops []string
		frags []string
		want  string
		stop  bool
	}{
		{[]string{"\n\n"}, []string{"Hello", "\n", "\n", "world"}, "Hello", true},
		{[]string{"END"}, []string{"the E", "N", "D of"}, "the ", true},
		{[]string{"END"}, []string{"the E", "NO"}, "the ENO", false},
		{[]string{"abc", "bcd"}, []string{"xab", "cd"}, "x", true},
		{nil, []string{"a", "b"}, "ab", false},
	}
	for _, c := range cases {
		m := NewStopMatcher(c.stops)
		var out strings.Builder
		stopped := false
		for _, f := range c.frags {
			e, s := m.Push(f)
			out.WriteString(e)
			if s {
				stopped = true
				break
			}
		}
		if !stopped {
			out.WriteString(m.Flush())
		}
		if out.String() != c.want || stopped != c.stop {
			t.Errorf("stops %q frags %q: got %q stopped=%v, want %q %v", c.stops, c.frags, out.String(), stopped, c.want, c.stop)
		}
	}
}

func FuzzStopMatcher(f *testing.F) {
	f.Add("hello world END tail", "END", 3)
	f.Fuzz(func(t *testing.T, text, stop string, step int) {
		if step <= 0 || step > 16 {
			step = 1
		}
		m := NewStopMatcher([]string{stop})
		var out strings.Builder
		stopped := false
		for i := 0; i < len(text) && !stopped; i += step {
			e, s := m.Push(text[i:min(i+step, len(text))])
			out.WriteString(e)
			stopped = s
		}
		if !stopped {
			out.WriteString(m.Flush())
		}
		want := text
		if stop != "" {
			if i := strings.Index(text, stop); i >= 0 {
				want = text[:i]
			}
		}
		if out.String() != want {
			t.Fatalf("got %q want %q", out.String(), want)
		}
	})
}
