package rollout_test

import (
	"context"
	"log"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/rollout"
)

// The rollout side of a device that keeps "detector" up to date from the
// fleet: one link, its outbox, and the update agent fetching over the
// link's request topics. With no Activator the store's active pointer is
// switched after the checks and a serving process picks the version up
// when it next opens the model; runtime/device wires this with its engine
// (a swap while it serves), and is what an application uses.
func Example() {
	ctx := context.Background()
	st, err := store.Open(ctx, "/var/lib/edgeinfer/models.db", store.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	obst, err := store.Open(ctx, "/var/lib/edgeinfer/outbox.db", store.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer obst.Close()
	l, err := link.Open(ctx, link.Config{Broker: "tcp://broker:1883", Fleet: "plant-7", Device: "cam-12"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ob, err := link.OpenOutbox(ctx, obst, l, link.OutboxConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer ob.Close()

	cmds := link.NewCommands(l, 0)
	dev, err := rollout.New(rollout.Config{Board: "rpi5", Labels: map[string]string{"site": "berlin", "line": "3"}, CheckInterval: 10 * time.Minute},
		rollout.Deps{Link: l, Outbox: ob, Commands: cmds},
		update.Config{Model: "detector", Device: update.Device{ID: "cam-12", Board: "rpi5"},
			ImageRoot: "/etc/edgeinfer/image-root.json", DirectorRoot: "/etc/edgeinfer/director-root.json"},
		update.Deps{Store: st, Source: update.MQTTSource{R: rollout.Requester{L: l}}})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	if err := cmds.Start(ctx); err != nil {
		log.Fatal(err)
	}
}
