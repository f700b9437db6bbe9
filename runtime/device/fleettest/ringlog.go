package fleettest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// ringLog keeps a simulated device's latest log records (Info and above),
// so a test that times out can say what each device last reported: the
// devices' loggers would otherwise print thousands of lines a run, and
// discarding them hid why a rollout stalled.
type ringLog struct {
	mu    sync.Mutex
	lines []string
	next  int
}

// ringLen is how many records a device keeps.
const ringLen = 8

func (r *ringLog) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) < ringLen {
		r.lines = append(r.lines, s)
		return
	}
	r.lines[r.next] = s
	r.next = (r.next + 1) % ringLen
}

// recent returns the kept records, oldest first.
func (r *ringLog) recent() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.lines))
	out = append(out, r.lines[r.next:]...)
	return append(out, r.lines[:r.next]...)
}

// ringHandler is the slog.Handler writing to a ringLog.
type ringHandler struct {
	r     *ringLog
	attrs string
}

func (h ringHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h ringHandler) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s%s", rec.Time.Format(time.StampMilli), rec.Level, rec.Message, h.attrs)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.r.add(b.String())
	return nil
}

func (h ringHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range as {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	return ringHandler{r: h.r, attrs: b.String()}
}

// WithGroup flattens groups: the records are for a person reading a
// test's log.
func (h ringHandler) WithGroup(string) slog.Handler { return h }
