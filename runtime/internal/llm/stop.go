package llm

import "strings"

// StopMatcher holds back generated text that could be the start of a stop
// string, so a stop string that spans token boundaries is never emitted.
//
// Push each decoded fragment; it returns the text safe to show and whether a
// stop string was found (then nothing after it is shown). Flush returns what
// was held back when generation ends for another reason.
//
// A StopMatcher is not safe for concurrent use.
type StopMatcher struct {
	stops   []string
	pending strings.Builder
	done    bool
}

// NewStopMatcher returns a matcher for the given stop strings (empty ones are
// ignored).
func NewStopMatcher(stops []string) *StopMatcher {
	m := &StopMatcher{}
	for _, s := range stops {
		if s != "" {
			m.stops = append(m.stops, s)
		}
	}
	return m
}

// Push adds a fragment and returns the text that can be emitted now.
func (m *StopMatcher) Push(fragment string) (emit string, stopped bool) {
	if m.done {
		return "", true
	}
	if len(m.stops) == 0 {
		return fragment, false
	}
	m.pending.WriteString(fragment)
	buf := m.pending.String()
	cut := -1
	for _, s := range m.stops {
		if i := strings.Index(buf, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		m.done = true
		m.pending.Reset()
		return buf[:cut], true
	}
	// keep the longest suffix that is a proper prefix of some stop string
	hold := 0
	for _, s := range m.stops {
		for n := min(len(s)-1, len(buf)); n > hold; n-- {
			if strings.HasSuffix(buf, s[:n]) {
				hold = n
				break
			}
		}
	}
	m.pending.Reset()
	m.pending.WriteString(buf[len(buf)-hold:])
	return buf[:len(buf)-hold], false
}

// Flush returns the held-back text (call it when generation ends without a
// stop string).
func (m *StopMatcher) Flush() string {
	if m.done {
		return ""
	}
	s := m.pending.String()
	m.pending.Reset()
	return s
}

// Holding reports whether text is held back because it may be the start
// of a stop string.
func (m *StopMatcher) Holding() bool { return m.pending.Len() > 0 }
