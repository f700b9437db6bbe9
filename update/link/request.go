package link

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
)

// Request publishes body on the device's request topic
// req/<name>/<id> (QoS 1, id a fresh random correlation id) and waits for
// the cloud's answer on res/<name>/<id>, which it returns. Bodies are
// opaque bytes both ways, so a chunk of a model travels without
// re-encoding. The link subscribes to res/+/+ on every connection.
//
// Request does not go through the outbox: a request made while the broker
// is away fails with ErrNotConnected, and one whose answer does not come
// ends with ctx; the caller retries (requests must be idempotent). A late
// answer to a request given up on is discarded.
func (l *Link) Request(ctx context.Context, name string, body []byte) ([]byte, error) {
	if name == "" || strings.ContainsAny(name, "/+#") {
		return nil, fmt.Errorf("link: request %q: name must be one topic level", name)
	}
	var raw [12]byte
	_, _ = rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	ch := make(chan []byte, 1)
	l.mu.Lock()
	l.mu.pending[id] = ch
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.mu.pending, id)
		l.mu.Unlock()
	}()
	if err := l.Publish(ctx, l.topics.Request(name, id), 1, false, body); err != nil {
		return nil, fmt.Errorf("link: request %s: %w", name, err)
	}
	select {
	case b := <-ch:
		return b, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("link: request %s: no answer: %w", name, ctx.Err())
	case <-l.ctx.Done():
		return nil, ErrClosed
	}
}

// onResponse routes an answer on res/<name>/<id> to its waiter.
func (l *Link) onResponse(m Message) {
	rest, ok := l.topics.Under(m.Topic)
	if !ok {
		return
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return
	}
	l.mu.Lock()
	ch := l.mu.pending[rest[i+1:]]
	l.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m.Payload:
		default: // a duplicate answer
		}
	}
}
