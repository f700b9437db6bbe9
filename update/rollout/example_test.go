package rollout_test

import (
	"context"
	"log"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/rollout"
	"github.com/edgeinfer/edgeinfer/update/serving"
)

// A device that keeps "detector" up to date from the fleet's rollouts: one
// link, its outbox, an engine that swaps versions at run time, and the
// update agent fetching over the link's request topics.
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
	eng, err := engine.Open(ctx, engine.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close(ctx)
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

	sink := rollout.Events()
	ag, err := update.New(update.Config{Model: "detector", Device: update.Device{ID: "cam-12", Board: "rpi5"},
		ImageRoot: "/etc/edgeinfer/image-root.json", DirectorRoot: "/etc/edgeinfer/director-root.json"},
		update.Deps{Store: st, Source: update.MQTTSource{R: rollout.Requester{L: l}},
			Activator: serving.EngineActivator{Engine: eng, Store: st}, Events: sink})
	if err != nil {
		log.Fatal(err)
	}
	cmds := link.NewCommands(l, 0)
	dev, err := rollout.New(rollout.Config{Board: "rpi5", Labels: map[string]string{"site": "berlin", "line": "3"}, CheckInterval: 10 * time.Minute},
		rollout.Deps{Link: l, Outbox: ob, Agent: ag, Commands: cmds}, "detector", sink)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	if err := cmds.Start(ctx); err != nil {
		log.Fatal(err)
	}
	// ... serve requests with eng until shutdown.
}
