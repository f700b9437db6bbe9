// Command fleet tells the story of two rollouts on a simulated fleet, all
// in one process and offline: a local mosquitto broker, a fleet manager
// (fleet serve, in-process) and N simulated kiosks, each a real device
// (its own model store, MQTT link, update agent and ONNX Runtime engine
// serving the tiny-test preset).
//
// Release 1 goes out in waves (25, 50, 100 %); release 2 is broken — its
// health check fails — so the canaries of the first wave reject it, stay
// on 1, and the rollout halts itself before the second wave. Every change
// is printed as it happens, then the fleet's status table.
//
//	go run ./examples/fleet [-n 12]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/device/fleettest"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

const (
	fleetName = "demo"
	model     = "tiny"
)

// Config is the demo's plain-data configuration.
type Config struct {
	// Devices is the number of simulated kiosks; 0 means 12.
	Devices int
	// Dir holds the broker's, the repository's and the devices' files;
	// "" means a temporary directory removed at the end.
	Dir string
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Devices < 0 || c.Devices > 500 {
		return fmt.Errorf("fleet demo: %d devices; use 1 to 500 (each runs its own engine)", c.Devices)
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runMain(ctx, os.Stdout, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func runMain(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	n := fs.Int("n", 12, "number of simulated kiosks")
	dir := fs.String("dir", "", "directory for the broker, repository and devices (default: a temporary one)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return Run(ctx, w, Config{Devices: *n, Dir: *dir})
}

// Run runs the whole story, printing it to w.
func Run(ctx context.Context, w io.Writer, cfg Config) (err error) {
	if err := cfg.Validate(); err != nil {
		return err
	}
	n := cmp(cfg.Devices, 12)
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "edgeinfer-fleet-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tl := &timeline{w: w, start: time.Now()}

	broker, err := startBroker(filepath.Join(dir, "broker"))
	if err != nil {
		return err
	}
	defer broker.stop()
	tl.say("mosquitto listening on %s", broker.url)

	repoDir, keys := filepath.Join(dir, "repo"), filepath.Join(dir, "keys")
	repo, err := fleet.Init(repoDir, keys, keys, fleet.InitOptions{Director: true}, nil)
	if err != nil {
		return err
	}
	srv, err := fleet.Serve(ctx, fleet.ServeConfig{Broker: broker.url, Fleet: fleetName, Instance: "manager",
		Repo: repoDir, Keys: []string{keys}, Tick: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	defer srv.Close()
	tl.say("fleet manager serving repository %s (release keys and a director)", repoDir)

	devs, err := fleettest.StartFleet(ctx, fleettest.Options{Broker: broker.url, Fleet: fleetName, Dir: filepath.Join(dir, "devices"),
		ImageRoot: repo.RootPath(update.RepoImage), DirectorRoot: repo.RootPath(update.RepoDirector), Model: model, Board: "kiosk-sim",
		Labels:            func(i int) map[string]string { return map[string]string{"site": "store-" + strconv.Itoa(i%3)} },
		TelemetryInterval: 2 * time.Second, CheckInterval: 30 * time.Second}, n)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, devs.Close()) }()
	op, err := fleet.Dial(ctx, fleet.ClientConfig{Broker: broker.url, Fleet: fleetName})
	if err != nil {
		return err
	}
	defer op.Close()
	tl.say("%d kiosks started (each: model store, MQTT link, update agent, ONNX Runtime engine)", n)
	if err := waitFor(ctx, "every kiosk reports its update state", time.Minute, func() bool {
		c := 0
		for _, d := range op.View().Devices() {
			if d.Update != nil {
				c++
			}
		}
		return c == n
	}); err != nil {
		return err
	}
	tl.say("every kiosk reported in, none runs %s yet", model)

	// The watcher prints what changes in the manager's view of the fleet.
	wctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); tl.watch(wctx, op) }()
	defer func() { stopWatch(); wg.Wait() }()

	publish := func(version, layer string, bad bool) error {
		b := filepath.Join(dir, "bundles", version)
		if err := fleettest.TinyBundle(ctx, b, model, version, layer); err != nil {
			return err
		}
		if err := fleettest.SetHealth(ctx, b, 6, bad); err != nil {
			return err
		}
		rel, _, err := repo.Publish(ctx, b, fleet.ReleaseOptions{})
		if err != nil {
			return err
		}
		what := "health check: its own greedy output of the golden prompt"
		if bad {
			what = "BROKEN: its health check expects tokens the model does not produce"
		}
		tl.say("published %s@%s, %d files signed (%s)", model, version, len(rel.Files), what)
		return nil
	}
	rollout := func(r fleet.Rollout) (*fleet.Rollout, error) {
		if err := op.StartRollout(ctx, r); err != nil {
			return nil, err
		}
		tl.say("rollout %s of %s@%s started: waves %v %%", r.ID, r.Model, r.Version, r.Waves)
		var last *fleet.Rollout
		err := waitFor(ctx, "rollout "+r.ID+" ends", 3*time.Minute, func() bool {
			last = op.View().Rollout(r.ID)
			return last != nil && last.Started && last.Done()
		})
		return last, err
	}

	if err := publish("1", "", false); err != nil {
		return err
	}
	r1, err := rollout(fleet.Rollout{ID: "r1", Model: model, Version: "1", Waves: []int{25, 50, 100}, SuccessPercent: 100})
	if err != nil {
		return err
	}
	if r1.State != fleet.RolloutCompleted {
		return fmt.Errorf("rollout r1 %s: %s", r1.State, r1.Reason)
	}
	if err := waitFor(ctx, "every kiosk runs 1", time.Minute, func() bool { return devs.Versions()["1"] == n }); err != nil {
		return err
	}

	if err := publish("2", "model.layers.0.", true); err != nil {
		return err
	}
	r2, err := rollout(fleet.Rollout{ID: "r2", Model: model, Version: "2", Waves: []int{25, 50, 100}})
	if err != nil {
		return err
	}
	if r2.State != fleet.RolloutHalted {
		return fmt.Errorf("rollout r2 %s, want halted: %s", r2.State, r2.Reason)
	}
	// The rollout halts on the first failure; a canary still checking
	// reports its own failure (or abandons the update) a moment later.
	_ = waitFor(ctx, "the canaries settle", 30*time.Second, func() bool {
		c := r2.Counts(op.View().Devices())
		return c[fleet.StepAssigned]+c[fleet.StepUpdating] == 0
	})
	time.Sleep(500 * time.Millisecond) // let the watcher print the last changes
	stopWatch()
	wg.Wait()

	tl.say("story over in %v", time.Since(tl.start).Round(100*time.Millisecond))
	fmt.Fprintln(w)
	if err := fleet.Report(op.View(), time.Now()).WriteTable(w); err != nil {
		return err
	}
	if v := devs.Versions(); v["1"] != n {
		return fmt.Errorf("kiosks by version %v: every kiosk should still run 1", v)
	}
	fmt.Fprintf(w, "\nevery one of the %d kiosks runs %s@1; release 2 never got past the canaries\n", n, model)
	return nil
}

// timeline prints time-stamped lines, from Run and from the watcher.
type timeline struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (t *timeline) say(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "%7.1fs  %s\n", time.Since(t.start).Seconds(), fmt.Sprintf(format, args...))
}

// watch polls the operator's view and says what changed: each rollout's
// state and wave, each kiosk's update phase and active version.
func (t *timeline) watch(ctx context.Context, op *fleet.Client) {
	type rkey struct {
		state    string
		wave     int
		assigned int
	}
	rolls := map[string]rkey{}
	devs := map[string]string{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		v := op.View()
		// Devices first: a halt is the consequence of a device's failure.
		d := v.Devices()
		for _, id := range slices.Sorted(maps.Keys(d)) {
			u := d[id].Update
			if u == nil {
				continue
			}
			k := string(u.Phase) + "|" + u.Version + "|" + u.Active
			if devs[id] == k {
				continue
			}
			first := devs[id] == ""
			devs[id] = k
			if first && u.Phase == "" {
				continue
			}
			t.say("  %s %s", id, describe(u.Phase, u.Version, u.Active, u.Reason))
		}
		for _, r := range v.Rollouts() {
			if !r.Started {
				continue
			}
			k := rkey{r.State, r.Wave, r.Assigned}
			if old, ok := rolls[r.ID]; ok && old == k {
				continue
			}
			rolls[r.ID] = k
			switch {
			case r.State == fleet.RolloutHalted:
				t.say("rollout %s HALTED at wave %d/%d with %d of %d assigned: %s", r.ID, r.Wave+1, len(r.Waves), r.Assigned, len(r.Targets), r.Reason)
			case r.Done():
				t.say("rollout %s %s: %d of %d kiosks assigned", r.ID, r.State, r.Assigned, len(r.Targets))
			default:
				t.say("rollout %s wave %d/%d (%d %%): %d of %d kiosks assigned %s@%s", r.ID, r.Wave+1, len(r.Waves), r.Waves[r.Wave],
					r.Assigned, len(r.Targets), r.Model, r.Version)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// describe says what a kiosk's update state means.
func describe(p update.Phase, version, active, reason string) string {
	switch p {
	case update.PhaseActive:
		return fmt.Sprintf("runs %s@%s (health check passed)", model, active)
	case update.PhaseFailed:
		return fmt.Sprintf("health check FAILED on %s, rolled back: runs %s (%s)", version, orNone(active), short(reason))
	case update.PhaseRolledBack:
		return fmt.Sprintf("ROLLED BACK from %s: runs %s (%s)", version, orNone(active), short(reason))
	case update.PhaseAbandoned:
		return fmt.Sprintf("abandoned %s (no longer assigned): runs %s", version, orNone(active))
	}
	return fmt.Sprintf("%s %s (runs %s)", p, version, orNone(active))
}

func orNone(v string) string {
	if v == "" {
		return "nothing"
	}
	return model + "@" + v
}

func short(s string) string {
	if r := []rune(s); len(r) > 90 {
		return string(r[:90]) + "…"
	}
	return s
}

func cmp(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func waitFor(ctx context.Context, what string, d time.Duration, ok func() bool) error {
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting until %s", d, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// broker is a mosquitto process on 127.0.0.1, started as
// pkg/link/mosquittotest starts one per test.
type broker struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
}

func startBroker(dir string) (*broker, error) {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		bin = "/usr/sbin/mosquitto" // Debian's package installs it outside a user's PATH
		if _, err := os.Stat(bin); err != nil {
			return nil, errors.New("mosquitto is not installed: apt-get install mosquitto (the demo runs its own broker on 127.0.0.1)")
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// user root: started as root, mosquitto would otherwise switch to the
	// mosquitto user, who cannot read this directory. The in-flight and
	// queue limits are lifted as for the fleet's scale tests (SCALE.md):
	// the manager's one connection carries every device's chunks.
	conf := fmt.Sprintf("user root\nlistener %d 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\nmax_queued_bytes 0\nmax_inflight_messages 0\n", port)
	cf := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	log := &syncWriter{b: &strings.Builder{}}
	cmd := exec.Command(bin, "-c", cf)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start mosquitto: %w", err)
	}
	b := &broker{url: fmt.Sprintf("tcp://127.0.0.1:%d", port), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(b.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return b, nil
		}
		if time.Now().After(deadline) {
			b.stop()
			return nil, fmt.Errorf("mosquitto did not listen on %d: %v\n%s", port, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *broker) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
}

// syncWriter lets the broker's stdout and stderr share one log.
type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
