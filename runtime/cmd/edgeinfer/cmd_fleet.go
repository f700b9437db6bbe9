package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

func init() {
	register(&command{
		name:    "fleet",
		summary: "the fleet: signed releases (keygen, publish, sign, assign), rollouts over MQTT (serve, rollout, rollback, status)",
		run:     runFleet,
	})
	for _, c := range []*fleetCommand{
		{name: "keygen", summary: "create the TUF repositories (image; --director too) with new keys"},
		{name: "publish", summary: "sign a release (--bundle DIR | --from-store FILE --ref NAME@VERSION), its new chunks into DIR/chunks"},
		{name: "sign", summary: "timestamp: re-sign the timestamp before it expires; root --rotate ROLES: a new root with new keys"},
		{name: "assign", summary: "--release NAME@VERSION [--devices a,b]: sign the director's assignment"},
	} {
		registerFleet(c)
	}
}

// fleetCommand is one fleet subcommand. run is nil for the repository
// subcommands (keygen, publish, sign, assign), which runFleet handles with
// one set of flags; the others parse their own.
type fleetCommand struct {
	name    string
	summary string // one line, for 'edgeinfer fleet -h'
	run     func(ctx context.Context, stdout io.Writer, args []string) error
}

// fleetCommands holds every fleet subcommand, registered from init: the
// repository ones here, the broker ones (serve, rollout, rollback,
// status) in cmd_fleet_ops.go. 'edgeinfer fleet -h' lists them all.
var fleetCommands = map[string]*fleetCommand{}

func registerFleet(c *fleetCommand) {
	if _, dup := fleetCommands[c.name]; dup {
		panic("edgeinfer: duplicate fleet subcommand " + c.name)
	}
	fleetCommands[c.name] = c
}

// fleetUsage is the fleet's help: every registered subcommand with its
// summary, then what the repository subcommands share.
func fleetUsage() string {
	names := make([]string, 0, len(fleetCommands))
	for n := range fleetCommands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: edgeinfer fleet <subcommand> [flags]\n\nsubcommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-9s %s\n", n, fleetCommands[n].summary)
	}
	b.WriteString(`
keygen, publish, sign and assign work on the release repository
(--repo DIR --keys DIR, flags below); serve, rollout, rollback and status
on the broker (--broker URL --fleet NAME: 'edgeinfer fleet <subcommand> -h').
DIR is laid out for any static HTTPS host; devices read it with
'edgeinfer update --source https://host/DIR'. Keep --root-keys offline.

flags of keygen, publish, sign and assign:`)
	return b.String()
}

func runFleet(ctx context.Context, stdout io.Writer, args []string) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		c, ok := fleetCommands[args[0]]
		if !ok {
			return fmt.Errorf("%w: unknown fleet subcommand %q\n%s", errUsage, args[0], fleetUsage())
		}
		if c.run != nil {
			return c.run(ctx, stdout, args[1:])
		}
	}
	fs := newFlagSet("fleet")
	repoDir := fs.String("repo", "", "repository `dir` (what the HTTPS host serves)")
	keyDir := fs.String("keys", "", "online signing keys `dir` (targets, snapshot, timestamp)")
	rootKeys := fs.String("root-keys", "", "offline root keys `dir` (default: --keys)")
	rootN := fs.Int("root-keys-n", 1, "keygen: root keys")
	rootT := fs.Int("root-threshold", 1, "keygen: root signatures required")
	targetsN := fs.Int("targets-keys-n", 1, "keygen: targets keys")
	targetsT := fs.Int("targets-threshold", 1, "keygen: targets signatures required")
	director := fs.Bool("director", false, "keygen: also create the director repository")
	tsExpiry := fs.Duration("timestamp-expiry", fleet.DefaultTimestampExpiry, "how long a timestamp is valid")
	bundleDir := fs.String("bundle", "", "publish: bundle `dir`")
	fromStore := fs.String("from-store", "", "publish: model store `file` to read --ref from")
	ref := fs.String("ref", "", "publish: NAME@VERSION in --from-store")
	counter := fs.Uint64("counter", 0, "publish: release counter (0: one above the highest)")
	boards := fs.String("boards", "", "publish: boards the release is for (comma separated; empty: any)")
	providers := fs.String("providers", "", "publish: providers of which a device needs one")
	sdkMin := fs.String("sdk-min", "", "publish: lowest SDK version that runs it")
	sdkMax := fs.String("sdk-max", "", "publish: highest SDK version that runs it")
	repoName := fs.String("repo-name", update.RepoImage, "sign: image or director")
	rotate := fs.String("rotate", "", "sign root: roles whose keys are replaced (comma separated)")
	newN := fs.Int("new-keys-n", 1, "sign root: keys per rotated role")
	newT := fs.Int("new-threshold", 1, "sign root: threshold of rotated roles")
	release := fs.String("release", "", "assign: NAME@VERSION")
	devices := fs.String("devices", "", "assign: device ids (empty: every device)")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), fleetUsage()); fs.PrintDefaults() }
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: a subcommand is required", errUsage)
	}
	if *repoDir == "" || *keyDir == "" {
		return fmt.Errorf("%w: --repo and --keys are required", errUsage)
	}
	if *rootKeys == "" {
		*rootKeys = *keyDir
	}
	opts := fleet.InitOptions{RootKeys: *rootN, RootThreshold: *rootT, TargetsKeys: *targetsN, TargetsThreshold: *targetsT,
		Director: *director, TimestampExpiry: *tsExpiry}
	if pos[0] == "keygen" {
		r, err := fleet.Init(*repoDir, *keyDir, *rootKeys, opts, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "repository %s\nprovision devices with %s\n", r.Dir, r.RootPath(update.RepoImage))
		if *director {
			fmt.Fprintf(stdout, "and the director root %s\n", r.RootPath(update.RepoDirector))
		}
		return nil
	}
	r, err := fleet.Open(*repoDir, opts, nil, *keyDir, *rootKeys)
	if err != nil {
		return err
	}
	switch pos[0] {
	case "publish":
		o := fleet.ReleaseOptions{Counter: *counter, Boards: splitList(*boards), Providers: splitList(*providers),
			SDK: update.SDKRange{Min: *sdkMin, Max: *sdkMax}}
		start := time.Now()
		var rel *update.Release
		var stats fleet.PublishStats
		switch {
		case *bundleDir != "":
			rel, stats, err = r.Publish(ctx, *bundleDir, o)
		case *fromStore != "" && *ref != "":
			st, oerr := store.Open(ctx, *fromStore, store.Options{})
			if oerr != nil {
				return oerr
			}
			rel, stats, err = r.PublishFromStore(ctx, st, *ref, o)
			st.Close()
		default:
			return fmt.Errorf("%w: publish needs --bundle DIR or --from-store FILE --ref NAME@VERSION", errUsage)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "published %s@%s counter %d (targets v%d): %d files, %d bytes in %d chunks; stored %d new chunks, %d bytes (%.1f s)\n",
			rel.Name, rel.Version, rel.Counter, stats.TargetsVers, stats.Files, stats.Bytes, stats.Chunks, stats.NewChunks, stats.NewBytes, time.Since(start).Seconds())
		return nil
	case "sign":
		if len(pos) != 2 {
			return fmt.Errorf("%w: sign timestamp | sign root --rotate ROLES", errUsage)
		}
		switch pos[1] {
		case "timestamp":
			if err := r.RefreshTimestamp(*repoName); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s timestamp re-signed, valid %s\n", *repoName, *tsExpiry)
			return nil
		case "root":
			if err := r.RotateRoot(fleet.RotateOptions{Repo: *repoName, Roles: splitList(*rotate), Keys: *newN, Threshold: *newT, KeyDir: *keyDir}); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s root rotated (new keys for %s)\n", *repoName, orNone(*rotate))
			return nil
		}
		return fmt.Errorf("%w: sign %q (want timestamp or root)", errUsage, pos[1])
	case "assign":
		ref, err := store.ParseRef(*release)
		if err != nil || ref.Version == "" {
			return fmt.Errorf("%w: --release NAME@VERSION", errUsage)
		}
		if err := r.Assign(ref.Name, ref.Version, splitList(*devices)); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "director assigns %s to %s\n", ref, orNone(*devices))
		return nil
	}
	return fmt.Errorf("%w: unknown fleet subcommand %q", errUsage, pos[0])
}
