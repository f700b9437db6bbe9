package link_test

import (
	"context"
	"fmt"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/store"
)

// A device connects, keeps an outbox in a store file and publishes an
// event that survives an outage or a restart until the broker has it.
func Example() {
	ctx := context.Background()
	l, err := link.Open(ctx, link.Config{Broker: "tcp://127.0.0.1:1883", Fleet: "plant-7", Device: "cam-12"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	st, err := store.Open(ctx, "/var/lib/edgeinfer/outbox.db", store.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	ob, err := link.OpenOutbox(ctx, st, l, link.OutboxConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ob.Close()
	_, err = ob.Enqueue(ctx, l.Topics().Events(), link.ClassEvent, func(seq uint64) []byte {
		return fmt.Appendf(nil, `{"seq":%d,"event":"started"}`, seq)
	})
	if err == nil {
		err = ob.Sync(ctx) // on disk now
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = ob.Flush(fctx) // acknowledged by the broker, as far as it is reachable
}

// The topics of one device.
func ExampleTopics() {
	t := link.NewTopics("plant-7", "cam-12")
	fmt.Println(t.Status())
	fmt.Println(t.Cmd("ping"))
	fmt.Println(t.CmdResponse("ping"))
	// Output:
	// edgeinfer/v1/plant-7/cam-12/status
	// edgeinfer/v1/plant-7/cam-12/cmd/ping
	// edgeinfer/v1/plant-7/cam-12/cmdres/ping
}

// The receiver's side: drop redelivered messages by (device, seq).
func ExampleDedup() {
	d := link.NewDedup(0)
	for _, seq := range []uint64{1, 2, 2, 3} {
		dup, _ := d.Seen("cam-12", seq)
		fmt.Println(seq, dup)
	}
	// Output:
	// 1 false
	// 2 false
	// 2 true
	// 3 false
}
