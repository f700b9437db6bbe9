package plugin

import (
	"strings"
	"sync"
)

// tail keeps what a plugin wrote to standard error since the call began:
// the first bytes (where the Go runtime's "fatal error: ..." line is) and
// the last ones, so that a trap's error can quote them without letting a
// chatty plugin grow host memory.
type tail struct {
	mu    sync.Mutex
	head  []byte
	end   []byte
	total int
}

const headBytes, tailBytes = 512, 1024

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	t.total += n
	if room := headBytes - len(t.head); room > 0 {
		k := min(room, len(p))
		t.head = append(t.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > tailBytes {
		p = p[len(p)-tailBytes:]
	}
	t.end = append(t.end, p...)
	if over := len(t.end) - tailBytes; over > 0 {
		t.end = append(t.end[:0], t.end[over:]...)
	}
	return n, nil
}

func (t *tail) reset() {
	t.mu.Lock()
	t.head, t.end, t.total = t.head[:0], t.end[:0], 0
	t.mu.Unlock()
}

// summary is the first lines written, which name the failure.
func (t *tail) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lines []string
	for _, l := range strings.Split(string(t.head), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "goroutine ") {
			lines = append(lines, l)
		}
		if len(lines) == 2 {
			break
		}
	}
	return strings.Join(lines, " | ")
}
