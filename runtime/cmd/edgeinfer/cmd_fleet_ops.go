package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// The fleet's operations on the broker: serve, rollout, rollback, status,
// handed here by runFleet.
func init() {
	for _, c := range []*fleetCommand{
		{name: "serve", summary: "answer the devices' metadata and chunk requests over MQTT; with --keys, lead the rollouts", run: runFleetServe},
		{name: "rollout", summary: "start a rollout in waves (--release NAME@VERSION), or pause, resume, abort or roll back one", run: runFleetRollout},
		{name: "rollback", summary: "roll devices of a rollout back to their previous version (--id ID --devices a,b | --select k=v)", run: runFleetRollback},
		{name: "status", summary: "per device and per rollout: versions, health, rollout step, TTFT p99 and goodput (--watch, --json)", run: runFleetStatus},
	} {
		registerFleet(c)
	}
}

// brokerFlags are the connection flags the broker subcommands share.
type brokerFlags struct {
	broker, fleet, user, password, ca, cert, key *string
}

func addBrokerFlags(fs *flag.FlagSet) brokerFlags {
	return brokerFlags{
		broker:   fs.String("broker", "tcp://127.0.0.1:1883", "broker `url`"),
		fleet:    fs.String("fleet", "", "fleet name (topics edgeinfer/v1/<fleet>/...)"),
		user:     fs.String("username", "", "broker user"),
		password: fs.String("password", os.Getenv("EDGEINFER_MQTT_PASSWORD"), "broker password (default $EDGEINFER_MQTT_PASSWORD)"),
		ca:       fs.String("ca-file", "", "CA `file` of the broker's certificate"),
		cert:     fs.String("cert-file", "", "client certificate `file` (mTLS)"),
		key:      fs.String("key-file", "", "client key `file` (mTLS)"),
	}
}

func (b brokerFlags) client() fleet.ClientConfig {
	return fleet.ClientConfig{Broker: *b.broker, Fleet: *b.fleet, Username: *b.user, Password: *b.password, CAFile: *b.ca, CertFile: *b.cert, KeyFile: *b.key}
}

const fleetServeUsage = `usage: edgeinfer fleet serve --fleet NAME --repo DIR [--keys DIR] [--instance NAME] [--broker URL]

Answers the devices' metadata and chunk requests over MQTT from DIR (shared
subscriptions: run several instances with one --group and they share the
load), keeps the fleet's state from the devices' retained topics, and, with
the director's keys (--keys), leads: advances rollouts and signs the
director's assignments. With --bulk-url the devices fetch metadata and
chunks from that static host instead (nginx, object storage, a CDN serving
DIR's image/, director/ and chunks/), and the broker carries control only.
Stops on SIGTERM.`

func runFleetServe(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("fleet serve")
	b := addBrokerFlags(fs)
	repo := fs.String("repo", "", "repository `dir` (fleet keygen/publish)")
	keys := fs.String("keys", "", "signing keys `dir` (the director's); empty: serve only, never lead")
	instance := fs.String("instance", "", "instance name (default: random)")
	group := fs.String("group", "edgeinfer-serve", "shared subscription group")
	workers := fs.Int("workers", 8, "requests answered concurrently")
	every := fs.Duration("stats-every", 10*time.Second, "print counters this often (0: never)")
	bulk := fs.String("bulk-url", "", "https:// `URL` of a static host serving --repo's files: devices fetch metadata and chunks there, over the broker only when it fails")
	heapProfile := fs.String("heap-profile", "", "on SIGTERM, write the Go heap's live objects (pprof) to this `file`: where fleet serve's memory a device went")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), fleetServeUsage); fs.PrintDefaults() }
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	c := b.client()
	cfg := fleet.ServeConfig{Broker: c.Broker, Fleet: c.Fleet, Username: c.Username, Password: c.Password, CAFile: c.CAFile,
		CertFile: c.CertFile, KeyFile: c.KeyFile, Instance: *instance, Repo: *repo, Keys: splitList(*keys), Group: *group, Workers: *workers, BulkURL: *bulk}
	if os.Getenv("GOGC") == "" {
		// Its heap is the fleet's view plus each pass's garbage: collected
		// at half the live heap's growth, not all of it, fleet serve's
		// peak stays nearer what it holds (SCALE.md).
		debug.SetGCPercent(50)
	}
	s, err := fleet.Serve(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintf(stdout, "fleet serve: instance %s, fleet %s, repository %s, broker %s\n", s.Instance(), c.Fleet, *repo, c.Broker)
	var tick <-chan time.Time
	if *every > 0 {
		t := time.NewTicker(*every)
		defer t.Stop()
		tick = t.C
	}
	// Connected means subscribed (the link makes every subscription
	// before it reports the connection): from this line on, requests are
	// answered, which is what a script or test starting it waits for.
	up := make(chan error, 1)
	go func() { up <- s.WaitConnected(ctx) }()
	for {
		select {
		case <-ctx.Done():
			if up != nil {
				<-up
			}
			var perr error
			if *heapProfile != "" {
				perr = writeHeapProfile(*heapProfile) // with the view still held
			}
			return errors.Join(perr, s.Close())
		case err := <-up:
			up = nil
			if err == nil {
				fmt.Fprintln(stdout, "fleet serve: connected and subscribed; answering requests")
			}
		case <-tick:
			st, _ := json.Marshal(s.Stats())
			fmt.Fprintf(stdout, "%s %s\n", time.Now().UTC().Format(time.RFC3339), st)
		}
	}
}

const fleetRolloutUsage = `usage: edgeinfer fleet rollout --fleet NAME --release NAME@VERSION [--waves 10,50,100] [--select k=v,...]
       edgeinfer fleet rollout --fleet NAME --id ID pause|resume|abort
       edgeinfer fleet rollout --fleet NAME --id ID rollback --devices a,b | --select k=v,...

Starts a rollout (retained on the broker; the leading fleet serve instance
runs it): targets chosen by --select (board, site, line, version = the active
version, any device label), waves of cumulative percentages, each waiting for
--success % of its devices within --window; it halts itself when --halt % of
the assigned devices fail their health check or refuse the release.`

func runFleetRollout(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("fleet rollout")
	b := addBrokerFlags(fs)
	release := fs.String("release", "", "NAME@VERSION to roll out")
	id := fs.String("id", "", "rollout id (default: NAME-VERSION)")
	waves := fs.String("waves", "10,50,100", "cumulative percentages, the last 100")
	sel := fs.String("select", "", "target labels k=v,... (board, site, line, version, ...)")
	devices := fs.String("devices", "", "rollback: the devices to roll back, a,b (or --select them)")
	success := fs.Int("success", 90, "% of a wave that must succeed")
	halt := fs.Int("halt", 10, "% of failures that halts the rollout")
	window := fs.Duration("window", 10*time.Minute, "time a wave may take")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), fleetRolloutUsage); fs.PrintDefaults() }
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	selector, err := parseSelector(*sel)
	if err != nil {
		return err
	}
	var ctl fleet.Control
	if len(pos) > 0 {
		if *id == "" {
			return fmt.Errorf("%w: %s needs --id", errUsage, pos[0])
		}
		// Checked before connecting: a control that would do nothing
		// (a rollback of nobody) is the operator's mistake, not the fleet's.
		ctl = fleet.Control{Action: pos[0], Selector: selector, Devices: splitList(*devices)}
		if err := ctl.Validate(); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	c, err := fleet.Dial(ctx, b.client())
	if err != nil {
		return err
	}
	defer c.Close()
	c.Settle(ctx, 500*time.Millisecond)
	if len(pos) > 0 {
		if err := c.Control(ctx, *id, ctl); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "rollout %s: %s sent (the leading fleet serve instance applies it)\n", *id, pos[0])
		return nil
	}
	ref, err := store.ParseRef(*release)
	if err != nil || ref.Version == "" {
		return fmt.Errorf("%w: --release NAME@VERSION", errUsage)
	}
	var ws []int
	for _, w := range splitList(*waves) {
		n, err := strconv.Atoi(w)
		if err != nil {
			return fmt.Errorf("%w: --waves %q: %v", errUsage, *waves, err)
		}
		ws = append(ws, n)
	}
	if *id == "" {
		*id = ref.Name + "-" + ref.Version
	}
	r := fleet.Rollout{ID: *id, Model: ref.Name, Version: ref.Version, Selector: selector, Waves: ws,
		SuccessPercent: *success, HaltPercent: *halt, WindowMS: window.Milliseconds()}
	if err := c.StartRollout(ctx, r); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rollout %s of %s started: waves %v; follow it with 'edgeinfer fleet status --watch'\n", *id, ref, ws)
	return nil
}

const fleetRollbackUsage = `usage: edgeinfer fleet rollback --fleet NAME --id ID --devices a,b | --select k=v,...

Rolls the named or selected devices of rollout ID back to the version they
ran before it (the same as 'edgeinfer fleet rollout --id ID rollback'): the
control is retained on the broker and the leading fleet serve instance
applies it. A rollback that names no device is refused before anything is
sent.`

func runFleetRollback(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("fleet rollback")
	b := addBrokerFlags(fs)
	id := fs.String("id", "", "rollout id")
	sel := fs.String("select", "", "devices to roll back by label, k=v,... (board, site, line, version, ...)")
	devices := fs.String("devices", "", "devices to roll back, a,b")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), fleetRollbackUsage); fs.PrintDefaults() }
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: fleet rollback takes no arguments (got %q)", errUsage, pos)
	}
	if *id == "" {
		return fmt.Errorf("%w: rollback needs --id", errUsage)
	}
	selector, err := parseSelector(*sel)
	if err != nil {
		return err
	}
	ctl := fleet.Control{Action: fleet.ActionRollback, Selector: selector, Devices: splitList(*devices)}
	if err := ctl.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	c, err := fleet.Dial(ctx, b.client())
	if err != nil {
		return err
	}
	defer c.Close()
	c.Settle(ctx, 500*time.Millisecond)
	if err := c.Control(ctx, *id, ctl); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rollout %s: rollback sent (the leading fleet serve instance applies it)\n", *id)
	return nil
}

func parseSelector(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: --select %q: want k=v,k=v", errUsage, s)
		}
		out[k] = v
	}
	return out, nil
}

func runFleetStatus(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("fleet status")
	b := addBrokerFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	watch := fs.Bool("watch", false, "redraw every --every until interrupted")
	every := fs.Duration("every", 2*time.Second, "watch: redraw interval")
	wait := fs.Duration("wait", 3*time.Second, "how long to collect telemetry before the first report")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: edgeinfer fleet status --fleet NAME [--json] [--watch]\n\nPer device: board, link, active/previous version, health, last seen, rollout step, TTFT p99 and goodput from its telemetry; per rollout: devices per step.")
		fs.PrintDefaults()
	}
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := fleet.Dial(ctx, b.client())
	if err != nil {
		return err
	}
	defer c.Close()
	wctx, cancel := context.WithTimeout(ctx, *wait)
	c.Settle(wctx, *wait)
	cancel()
	for {
		rep := fleet.Report(c.View(), time.Now())
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(rep); err != nil {
				return err
			}
		} else {
			if *watch {
				fmt.Fprint(stdout, "\x1b[H\x1b[2J")
			}
			if err := rep.WriteTable(stdout); err != nil {
				return err
			}
		}
		if !*watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*every):
		}
	}
}
