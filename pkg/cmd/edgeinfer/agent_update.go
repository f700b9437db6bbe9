package main

import (
	"context"
	"encoding/json"

	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/link"
)

// outboxEvents sends the update agent's events through the outbox on the
// device's events topic: durable, numbered, never dropped for space.
type outboxEvents struct {
	ob    *link.Outbox
	topic string
}

// updateEvents is the update.Events of the agent's link and outbox.
func updateEvents(ob *link.Outbox, l *link.Link) update.Events {
	return outboxEvents{ob: ob, topic: l.Topics().Events()}
}

// updateEventPayload is an update event on the wire: the event with the
// outbox's seq, for de-duplication by (device, seq).
type updateEventPayload struct {
	Schema string `json:"schema"`
	Seq    uint64 `json:"seq"`
	update.Event
}

func (o outboxEvents) Emit(ctx context.Context, e update.Event) error {
	_, err := o.ob.Enqueue(ctx, o.topic, link.ClassEvent, func(seq uint64) []byte {
		b, _ := json.Marshal(updateEventPayload{Schema: "edgeinfer.update-event/1", Seq: seq, Event: e})
		return b
	})
	return err
}
