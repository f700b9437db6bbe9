package fleettest

import (
	"strings"
	"sync"
)

// ringLog keeps a simulated device's latest log records, so a test that
// times out can say what each device last reported: the devices' loggers
// would otherwise print thousands of lines a run, and discarding them hid
// why a rollout stalled. It is the io.Writer of a slog.TextHandler, which
// writes each record in one call.
type ringLog struct {
	mu    sync.Mutex
	lines []string
	next  int
}

// ringLen is how many records a device keeps.
const ringLen = 8

func (r *ringLog) Write(p []byte) (int, error) {
	s := strings.TrimSuffix(string(p), "\n")
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) < ringLen {
		r.lines = append(r.lines, s)
	} else {
		r.lines[r.next] = s
		r.next = (r.next + 1) % ringLen
	}
	return len(p), nil
}

// recent returns the kept records, oldest first.
func (r *ringLog) recent() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.lines))
	out = append(out, r.lines[r.next:]...)
	return append(out, r.lines[:r.next]...)
}
