// Command mochi runs mochi-mqtt (github.com/mochi-mqtt/server), an MQTT
// broker written apart from Eclipse Mosquitto, for the tests: with
// EDGEINFER_TEST_BROKER=mochi, pkg/link/mosquittotest starts this instead
// of mosquitto, so the fleet's tests show what they rely on is MQTT and
// not one broker's ways. It is a module of its own: the SDK does not
// depend on it.
//
//	mochi -addr 127.0.0.1:1883 [-db FILE]
//
// -db keeps sessions, subscriptions, retained and in-flight messages in a
// bbolt file across restarts (mosquitto's persistence). It stops on
// SIGTERM or SIGINT. On SIGUSR1 it prints its clients and, for each shared
// subscription, the members the group would choose among (a stalled test
// asks for it: Broker.Dump in pkg/link/mosquittotest).
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
	"github.com/mochi-mqtt/server/v2/listeners"
	"go.etcd.io/bbolt"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:1883", "listen on this TCP `address`")
	db := flag.String("db", "", "persistence: a bbolt `file` (empty: none)")
	verbose := flag.Bool("v", false, "log each connection")
	flag.Parse()
	if err := run(*addr, *db, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "mochi:", err)
		os.Exit(1)
	}
}

func run(addr, db string, verbose bool) error {
	caps := mqtt.NewDefaultServerCapabilities()
	// As the tests' mosquitto: queues for offline persistent sessions are
	// not cut short (an outage test counts every message), and messages
	// do not expire while a device is away.
	caps.MaximumInflight = math.MaxUint16
	caps.MaximumClientWritesPending = 1 << 16
	caps.MaximumMessageExpiryInterval = 0 // never
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	s := mqtt.New(&mqtt.Options{Capabilities: caps, SysTopicResendInterval: 1,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))})
	if err := s.AddHook(new(auth.AllowHook), nil); err != nil {
		return err
	}
	if db != "" {
		if err := s.AddHook(new(bolt.Hook), &bolt.Options{Path: db, Options: &bbolt.Options{NoSync: false}}); err != nil {
			return fmt.Errorf("persistence in %s: %w", db, err)
		}
	}
	if err := s.AddListener(listeners.NewTCP(listeners.Config{ID: "tcp", Address: addr})); err != nil {
		return err
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	dump := make(chan os.Signal, 1)
	signal.Notify(dump, syscall.SIGUSR1)
	if err := s.Serve(); err != nil {
		return err
	}
	for {
		select {
		case <-dump:
			dumpState(os.Stderr, s)
		case <-stop:
			return s.Close()
		}
	}
}

// dumpState prints every client the broker holds (connected or not, taken
// over or not, its subscriptions and messages in flight) and, for each
// shared subscription, the members of its group on a topic the filter
// matches, each with whether the broker still holds it as a client: a
// group member that is not a client takes its share of the messages and
// delivers none.
func dumpState(w io.Writer, s *mqtt.Server) {
	fmt.Fprintln(w, "== mochi state")
	clients := s.Clients.GetAll()
	ids := slices.Sorted(maps.Keys(clients))
	shared := map[string]bool{}
	for _, id := range ids {
		cl := clients[id]
		subs := cl.State.Subscriptions.GetAll()
		filters := slices.Sorted(maps.Keys(subs))
		for _, f := range filters {
			if strings.HasPrefix(f, "$share/") {
				shared[f] = true
			}
		}
		fmt.Fprintf(w, "client %q closed=%v taken_over=%v inflight=%d subscriptions=%v\n",
			id, cl.Closed(), cl.IsTakenOver(), cl.State.Inflight.Len(), filters)
	}
	for _, f := range slices.Sorted(maps.Keys(shared)) {
		// $share/group/filter: a topic the filter matches.
		parts := strings.SplitN(f, "/", 3)
		if len(parts) < 3 {
			continue
		}
		topic := strings.NewReplacer("+", "x", "#", "x").Replace(parts[2])
		for group, members := range s.Topics.Subscribers(topic).Shared {
			for id := range members {
				cl, ok := clients[id]
				fmt.Fprintf(w, "shared %q on %q: group %q member %q client=%v connected=%v\n",
					f, topic, group, id, ok, ok && !cl.Closed())
			}
		}
	}
	fmt.Fprintln(w, "== end of mochi state")
}
