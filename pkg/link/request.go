package link

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
)

// Request publishes body on the device's request topic req/<topic>/<id>
// (QoS 1, id a fresh random correlation id) and waits for the cloud's
// answer on res/<topic>/<id>, which it returns. topic is relative and may
// have several levels ("tuf/chunk"); Link thereby implements the update
// agent's Requester (update.MQTTSource). Bodies are opaque bytes both
// ways, so a chunk of a model travels without re-encoding. The link
// subscribes to res/# on every connection.
//
// Request does not go through the outbox: a request made while the broker
// is away fails with ErrNotConnected, and one whose answer does not come
// ends with ctx; the caller retries (requests must be idempotent). A late
// answer to a request given up on is discarded.
func (l *Link) Request(ctx context.Context, topic string, body []byte) ([]byte, error) {
	if err := relativeTopic(topic); err != nil {
		return nil, fmt.Errorf("link: request: %w", err)
	}
	name := topic
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

// relativeTopic checks a request topic: levels without wildcards, none
// empty.
func relativeTopic(t string) error {
	for _, lv := range strings.Split(t, "/") {
		if lv == "" || strings.ContainsAny(lv, "+#\x00") {
			return fmt.Errorf("topic %q: want non-empty levels without '+' or '#'", t)
		}
	}
	return nil
}

// RequestHandler answers one device's request on the cloud side: device
// is the requesting device, topic the relative request topic
// ("tuf/chunk"); the returned bytes are the response body.
type RequestHandler func(ctx context.Context, device, topic string, payload []byte) []byte

// ServeRequests is the cloud side of Request: it answers the requests of
// every device of fleet with h, publishing each answer on the device's
// res/<topic>/<id>. With group set, the subscription is shared
// ($share/<group>/...: mosquitto hands each request to one of the servers
// subscribed in the group), so several fleet servers split the load and
// none holds state the others lack. Requests are answered one at a time
// per link, in arrival order.
func (l *Link) ServeRequests(ctx context.Context, fleet, group string, h RequestHandler) error {
	prefix := Root + "/" + fleet + "/"
	filter := prefix + "+/req/#"
	if group != "" {
		filter = "$share/" + group + "/" + filter
	}
	return l.Subscribe(ctx, filter, 1, func(m Message) {
		rest, ok := strings.CutPrefix(m.Topic, prefix)
		device, after, ok2 := strings.Cut(rest, "/")
		req, ok3 := strings.CutPrefix(after, "req/")
		i := strings.LastIndexByte(req, '/')
		if !ok || !ok2 || !ok3 || i <= 0 || i == len(req)-1 {
			return
		}
		topic, id := req[:i], req[i+1:]
		resp := h(l.ctx, device, topic, m.Payload)
		pctx, cancel := context.WithTimeout(l.ctx, l.cfg.ConnectTimeout)
		defer cancel()
		if err := l.Publish(pctx, prefix+device+"/res/"+topic+"/"+id, 1, false, resp); err != nil {
			l.log.Warn("link: response not sent", "device", device, "topic", topic, "err", err)
		}
	})
}
