//go:build cgo

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/platforms"
	"github.com/edgeinfer/edgeinfer/runtime/device"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
	"github.com/edgeinfer/edgeinfer/update/rollout"
	"github.com/edgeinfer/edgeinfer/update/wire"
)

func init() {
	register(&command{
		name:    "update",
		summary: "signed model updates for this device: check, apply, status, rollback",
		run:     runUpdate,
	})
}

const updateUsage = `usage: edgeinfer update <check|apply|status|rollback> --model NAME --root ROOT.json --source URL|DIR [flags]

  check     refresh the signed metadata and say what would be installed
  apply     install it: fetch the chunks the store lacks, verify, stage,
            health-check in an engine of its own, activate (an interrupted
            update is resumed or abandoned first)
  status    active and previous versions, and where the last update stands
  rollback  switch back to the previous version

--source is a directory or an http(s):// URL holding the repository that
'edgeinfer fleet publish' writes (image/, director/, chunks/).

--agent-config agent.json takes the store, model, roots, source, device
and board from a device agent's configuration (its update section). While
that agent runs it holds the store; status then reads the state the agent
publishes (retained) on the broker, and check/apply/rollback are refused:
the running agent updates itself (fleet rollout, or the update command).`

func runUpdate(ctx context.Context, stdout io.Writer, args []string) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") && !slices.Contains([]string{"check", "apply", "status", "rollback"}, args[0]) {
		return fmt.Errorf("%w: unknown update subcommand %q\n%s", errUsage, args[0], updateUsage)
	}
	fs := newFlagSet("update")
	storePath := fs.String("store", defaultStorePath(), "model store `file`")
	model := fs.String("model", "", "model `name` to keep up to date")
	root := fs.String("root", "", "pinned image repository root.json (provisioned)")
	director := fs.String("director-root", "", "pinned director root.json (install only what it assigns)")
	source := fs.String("source", "", "repository directory or http(s) base URL")
	ca := fs.String("ca", "", "PEM `file` of CA certificates for an https source (default: the system's)")
	deviceID := fs.String("device-id", "", "this device's id (director assignments)")
	board := fs.String("board", "", "this device's board")
	providers := fs.String("providers", "cpu", "execution providers this device has, comma separated")
	sdk := fs.String("sdk", update.SDKVersion, "SDK version releases are checked against")
	bps := fs.Int64("max-bytes-per-sec", 0, "download cap in bytes/s (0: none)")
	keep := fs.Int("keep", 0, "versions of the model kept on the device, active and previous included (0: 2)")
	asJSON := fs.Bool("json", false, "print JSON")
	agentCfg := fs.String("agent-config", "", "take store, model, roots, source and device from an agent.json `file`")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), updateUsage); fs.PrintDefaults() }
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("%w: one subcommand expected", errUsage)
	}
	var acfg device.Config
	var alink link.Config
	if *agentCfg != "" {
		if acfg, err = loadAgentConfig(*agentCfg); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		alink = acfg.LinkConfig()
		u := acfg.Update
		if u == nil {
			return fmt.Errorf("%w: --agent-config %s has no update section", errUsage, *agentCfg)
		}
		*storePath, *model, *root, *director, *deviceID = acfg.Store, u.Model, u.ImageRoot, u.DirectorRoot, acfg.Device
		*board = cmp.Or(acfg.Board, platforms.BoardName("/"))
		if u.Source != "" {
			*source, *ca = u.Source, u.SourceCAFile
		}
		if len(u.Providers) > 0 {
			*providers = strings.Join(u.Providers, ",")
		}
		if *bps == 0 {
			*bps = u.MaxBytesPerSec
		}
		if *keep == 0 {
			*keep = u.KeepVersions
		}
	}
	if *model == "" || *root == "" || (*source == "" && *agentCfg == "" && pos[0] != "status" && pos[0] != "rollback") {
		return fmt.Errorf("%w: --model, --root and --source are required", errUsage)
	}
	st, err := store.Open(ctx, *storePath, store.Options{})
	if errors.Is(err, store.ErrLocked) && *agentCfg != "" {
		if pos[0] != "status" {
			return fmt.Errorf("%w: the agent of %s is running and updates this device itself: roll the release out (edgeinfer fleet rollout), or stop the agent first", err, *agentCfg)
		}
		return agentUpdateStatus(ctx, stdout, alink, *asJSON)
	}
	if err != nil {
		return err
	}
	defer st.Close()
	var src update.Source
	switch {
	case *source != "":
		if src, err = update.OpenSource(*source, *ca); err != nil {
			return err
		}
	case *agentCfg != "" && pos[0] != "status" && pos[0] != "rollback":
		// the agent is stopped: fetch from the fleet over the broker as
		// the device itself
		l, err := link.Open(ctx, alink, nil)
		if err != nil {
			return err
		}
		defer l.Close()
		// Open connects in the background; a request before it is up
		// fails at once, so wait for it here (bounded: a broker away is
		// named, not waited on forever).
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err = l.WaitConnected(wctx)
		cancel()
		if err != nil {
			return fmt.Errorf("update %s: the fleet is asked over the broker %s, which is not reachable: %w", pos[0], alink.Broker, err)
		}
		src = update.MQTTSource{R: rollout.Requester{L: l}}
	default:
		src = update.FileSource{} // status and rollback read the store only
	}
	cfg := update.Config{Model: *model, ImageRoot: *root, DirectorRoot: *director, MaxBytesPerSec: *bps, Keep: *keep,
		Device: update.Device{ID: *deviceID, Board: *board, Providers: splitList(*providers), SDKVersion: *sdk}}
	if acfg.Update != nil {
		cfg.MetadataDir = acfg.Update.MetadataDir // the agent's trusted metadata, not a second copy
	}
	print := func(v any, text string) error {
		if *asJSON {
			b, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(stdout, string(b))
			return err
		}
		_, err := fmt.Fprintln(stdout, text)
		return err
	}
	events := update.EventFunc(func(_ context.Context, e update.Event) error {
		if *asJSON {
			b, _ := json.Marshal(e)
			_, err := fmt.Fprintln(stdout, string(b))
			return err
		}
		line := fmt.Sprintf("%s %s@%s", e.Kind, e.Model, e.Version)
		switch {
		case e.Kind == update.EventDownloading:
			line += fmt.Sprintf(" %.0f%% (%d of %d bytes)", e.Percent, e.Done, e.Total)
		case e.Health != nil:
			line += fmt.Sprintf(" matched %d/%d tokens, %.1f ms", e.Health.Matched, e.Health.Expected, e.Health.LatencyMS)
		}
		if e.Reason != "" {
			line += ": " + e.Reason
		}
		_, err := fmt.Fprintln(stdout, line)
		return err
	})
	agent, err := update.New(cfg, update.Deps{Store: st, Source: src, Events: events,
		Activator: device.CheckActivator{Store: st}})
	if err != nil {
		return err
	}
	noRelease := func(err error) error {
		if errors.Is(err, update.ErrNoRelease) {
			return fmt.Errorf("%w\n(check --model; a model gets a release with 'edgeinfer fleet publish --bundle DIR')", err)
		}
		return err
	}
	switch pos[0] {
	case "check":
		o, err := agent.Check(ctx)
		if errors.Is(err, update.ErrNoUpdate) {
			return print(map[string]string{"status": "up to date", "reason": err.Error()}, "up to date: "+err.Error())
		}
		if err != nil {
			return noRelease(err)
		}
		return print(o, fmt.Sprintf("offered %s@%s (counter %d): %d bytes, %d of them missing here",
			o.Release.Name, o.Release.Version, o.Release.Counter, o.Release.Size(), o.Missing))
	case "apply":
		start := time.Now()
		if _, err := agent.Resume(ctx); err != nil && !errors.Is(err, update.ErrNoUpdate) {
			return noRelease(err)
		}
		ref, err := agent.Apply(ctx)
		if errors.Is(err, update.ErrNoUpdate) {
			return print(map[string]string{"status": "up to date"}, "up to date: "+err.Error())
		}
		if err != nil {
			return noRelease(err)
		}
		return print(map[string]any{"active": ref.String(), "seconds": time.Since(start).Seconds(), "bytes_fetched": agent.BytesFetched()},
			fmt.Sprintf("active %s after %.2f s, %d bytes fetched", ref, time.Since(start).Seconds(), agent.BytesFetched()))
	case "status":
		s, err := agent.Status(ctx)
		if err != nil {
			return err
		}
		text := fmt.Sprintf("model %s: active %s, previous %s, installed counter %d\nlast update: %s %s@%s %s",
			s.Model, orNone(s.Active), orNone(s.Previous), s.Installed, orNone(string(s.Journal.Phase)), s.Journal.Model, s.Journal.Version, s.Journal.Reason)
		return print(s, strings.TrimSpace(text))
	case "rollback":
		ref, err := agent.Rollback(ctx)
		if err != nil {
			return err
		}
		return print(map[string]string{"active": ref.String()}, "active "+ref.String())
	}
	return fmt.Errorf("%w: unknown update subcommand %q", errUsage, pos[0])
}

// agentUpdateStatus reads a running agent's update state from where it
// publishes it, retained: the same record the fleet builds its view from.
// It connects as an operator's client (clean session, a name of its own),
// so the agent's session is untouched.
func agentUpdateStatus(ctx context.Context, stdout io.Writer, lc link.Config, asJSON bool) error {
	topics := link.NewTopics(lc.Fleet, lc.Device)
	lc.Device, lc.ClientID, lc.CleanSession = fleet.OperatorName(), "", true
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := link.Open(ctx, lc, nil)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := l.WaitConnected(ctx); err != nil {
		return fmt.Errorf("update status: the store is held by the running agent and the broker %s is not reachable: %w", lc.Broker, err)
	}
	got := make(chan []byte, 1)
	topic := wire.StateTopic(topics)
	if err := l.Subscribe(ctx, topic, 1, func(m link.Message) {
		select {
		case got <- m.Payload:
		default:
		}
	}); err != nil {
		return err
	}
	var p []byte
	select {
	case p = <-got:
	case <-ctx.Done():
		return fmt.Errorf("update status: the store is held by the running agent, and %s holds no retained state yet (has it connected?)", topic)
	}
	var s wire.State
	if err := json.Unmarshal(p, &s); err != nil || s.Schema != wire.StateSchema {
		return fmt.Errorf("update status: %s: not an update state (%v)", topic, err)
	}
	if asJSON {
		_, err := fmt.Fprintln(stdout, string(p))
		return err
	}
	_, err = fmt.Fprintf(stdout, "model %s: active %s, previous %s, installed counter %d\nlast update: %s %s@%s %s\n(from the running agent's retained state on %s, %s)\n",
		s.Model, orNone(s.Active), orNone(s.Previous), s.Installed, orNone(string(s.Phase)), s.Model, s.Version, s.Reason, topic, s.Time)
	return err
}
