package fleettest

import (
	"fmt"
	"strings"
	"sync"
)

// LogKeeper keeps the first Head and the latest Tail records of a log, so
// a test that times out can say what a simulated device (the latest 8) or
// a fleet serve instance (its start, where it subscribes, and its end)
// last reported: their loggers would otherwise print thousands of lines a
// run, and discarding them hid why a rollout stalled. It is the io.Writer
// of a slog.TextHandler, which writes each record in one call.
type LogKeeper struct {
	Head, Tail int

	mu         sync.Mutex
	head, tail []string
	next       int
	dropped    int // records neither kept in head nor still in tail
}

// deviceLogLen is how many records a device keeps.
const deviceLogLen = 8

func (k *LogKeeper) Write(p []byte) (int, error) {
	s := strings.TrimSuffix(string(p), "\n")
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case len(k.head) < k.Head:
		k.head = append(k.head, s)
	case len(k.tail) < k.Tail:
		k.tail = append(k.tail, s)
	case k.Tail > 0:
		k.tail[k.next] = s
		k.next = (k.next + 1) % k.Tail
		k.dropped++
	default:
		k.dropped++
	}
	return len(p), nil
}

// Lines returns the kept records in the order they came, with a line
// saying how many were dropped between the head and the tail.
func (k *LogKeeper) Lines() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := append([]string(nil), k.head...)
	if k.Head > 0 && k.dropped > 0 {
		out = append(out, fmt.Sprintf("... %d records dropped", k.dropped))
	}
	out = append(out, k.tail[k.next:]...)
	return append(out, k.tail[:k.next]...)
}
