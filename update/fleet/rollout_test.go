package fleet_test

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/device/fleettest"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
	"github.com/edgeinfer/edgeinfer/update/updatetest"
)

const model = "tiny"

// simEnv is a real mosquitto, a release repository with a director, and
// simulated devices running the tiny-test preset.
type simEnv struct {
	t                *testing.T
	ctx              context.Context
	broker           *mosquittotest.Broker
	repoDir, keys    string
	fleet            *fleettest.Fleet
	op               *fleet.Client
	servers          []*fleet.Server
	serveLogs        []*fleettest.LogKeeper // the first and latest log records of each server started without a Logger of its own
	published        map[string]*update.Release
	sysMu            sync.Mutex
	sysRecv, sysSent uint64
	nginx            *updatetest.Nginx // the static host, with newSimEnvWith's bulk
}

func newSimEnv(t *testing.T, n int) *simEnv { return newSimEnvWith(t, n, false) }

// newSimEnvWith is newSimEnv; with bulk, nginx serves the repository over
// HTTPS and the leader announces it (ServeConfig.BulkURL).
func newSimEnvWith(t *testing.T, n int, bulk bool) *simEnv {
	orttest.Need(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := &simEnv{t: t, ctx: ctx, repoDir: t.TempDir(), keys: t.TempDir(), published: map[string]*update.Release{}}
	e.broker = mosquittotest.Start(t, mosquittotest.Options{Extra: "sys_interval 1\nmax_queued_messages 10000\n"})
	r, err := fleet.Init(e.repoDir, e.keys, e.keys, fleet.InitOptions{Director: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.publish(r, "1", "", false)
	var caFile string
	if bulk {
		e.nginx = updatetest.StartNginx(t, e.repoDir)
		caFile = e.nginx.CAFile
		e.serveCfg(fleet.ServeConfig{Broker: e.broker.URL(), Fleet: "f", Instance: "a", Repo: e.repoDir, Keys: []string{e.keys},
			Tick: 200 * time.Millisecond, BulkURL: e.nginx.URL})
	} else {
		e.serve("a", true)
	}
	e.fleet, err = fleettest.StartFleet(ctx, fleettest.Options{Broker: e.broker.URL(), Fleet: "f", Dir: t.TempDir(), SourceCAFile: caFile,
		ImageRoot: r.RootPath(update.RepoImage), DirectorRoot: r.RootPath(update.RepoDirector), Model: model, Board: "sim",
		Labels:            func(i int) map[string]string { return map[string]string{"site": "s" + strconv.Itoa(i%2)} },
		TelemetryInterval: 2 * time.Second, CheckInterval: 30 * time.Second, Load: 5 * time.Second}, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.fleet.Close(); err != nil {
			t.Errorf("closing the fleet: %v", err)
		}
	})
	if e.op, err = fleet.Dial(ctx, fleet.ClientConfig{Broker: e.broker.URL(), Fleet: "f"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.op.Close() })
	e.waitFor("every device reports its update state", 60*time.Second, func() bool {
		n := 0
		for _, d := range e.op.View().Devices() {
			if d.Update != nil {
				n++
			}
		}
		return n == len(e.fleet.Devices)
	})
	return e
}

// publish builds and signs tiny@version (layer "" keeps the preset's
// weights; a layer name changes that layer), its health check failing
// when bad.
func (e *simEnv) publish(r *fleet.Repository, version, layer string, bad bool) *update.Release {
	e.t.Helper()
	if r == nil {
		var err error
		if r, err = fleet.Open(e.repoDir, fleet.InitOptions{}, nil, e.keys); err != nil {
			e.t.Fatal(err)
		}
	}
	dir := e.t.TempDir()
	if err := fleettest.TinyBundle(e.ctx, dir, model, version, layer); err != nil {
		e.t.Fatal(err)
	}
	if err := fleettest.SetHealth(e.ctx, dir, 6, bad); err != nil {
		e.t.Fatal(err)
	}
	rel, _, err := r.Publish(e.ctx, dir, fleet.ReleaseOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.published[version] = rel
	return rel
}

func (e *simEnv) serve(name string, keys bool) *fleet.Server {
	e.t.Helper()
	cfg := fleet.ServeConfig{Broker: e.broker.URL(), Fleet: "f", Instance: name, Repo: e.repoDir, Tick: 200 * time.Millisecond}
	if keys {
		cfg.Keys = []string{e.keys}
	}
	return e.serveCfg(cfg)
}

func (e *simEnv) serveCfg(cfg fleet.ServeConfig) *fleet.Server {
	e.t.Helper()
	if cfg.Logger == nil {
		lb := &fleettest.LogKeeper{Head: 40, Tail: 40}
		cfg.Logger = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
		e.serveLogs = append(e.serveLogs, lb)
	}
	s, err := fleet.Serve(e.ctx, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { s.Close() })
	e.servers = append(e.servers, s)
	return s
}

// waitFor waits until ok holds, checking it again each time the
// operator's view takes a message. What ok reads shows there: a device
// publishes its retained update state after each change of its store.
func (e *simEnv) waitFor(what string, d time.Duration, ok func() bool) {
	e.t.Helper()
	e.waitOn(what, d, e.op.View().Changed, ok)
}

// waitOn is waitUntil on the environment's test; when it times out, the
// test's log says where the fleet stood (dump).
func (e *simEnv) waitOn(what string, d time.Duration, changed func() <-chan struct{}, ok func() bool) {
	e.t.Helper()
	if !waitUntilOr(e.t, d, changed, ok) {
		e.dump()
		e.t.Fatalf("timed out after %v waiting until %s", d, what)
	}
}

// dump logs what a stalled rollout test needs to say where it stalled:
// the operator's view of each rollout and device, each fleet serve
// instance's own account, the broker's (mochi's) clients and shared
// subscription groups, and each device's journal.
func (e *simEnv) dump() {
	v := e.op.View()
	cur, last, hi := v.Leader()
	e.t.Logf("view: leader %+v (last %+v, highest epoch %v); instances %v", cur, last, hi, v.Instances())
	for _, r := range v.Rollouts() {
		e.t.Logf("rollout %s %s@%s: %s wave %d assigned %d of %d, reason %q, updated %s, epoch %v",
			r.ID, r.Model, r.Version, r.State, r.Wave, r.Assigned, len(r.Targets), r.Reason, r.Updated.Format(time.StampMilli), r.Epoch)
	}
	devs := v.Devices()
	for _, id := range slices.Sorted(maps.Keys(devs)) {
		if u := devs[id].Update; u != nil {
			e.t.Logf("view of %s: online %v, active %s, %s %s, checked %s, last event %s, refused %q, reason %q",
				id, devs[id].Online(), u.Active, u.Phase, u.Version, u.Checked, u.LastEvent, u.Refused, u.Reason)
		}
	}
	for _, s := range e.servers {
		st := s.Stats()
		e.t.Logf("fleet serve: leader %v (%d claims), %d devices in its view, %d meta and %d chunk requests, %d failed %v, %d director writes; %d connections, %d handler drops, link error %q",
			st.Leader, st.Claims, st.Devices, st.MetaRequests, st.ChunkRequests, st.Failed, st.Failures, st.DirectorWrites, st.Connects, st.HandlerDrops, st.LinkError)
		for _, f := range st.LastFailures {
			e.t.Logf("  failed at %s: %s %s: %s (%s)", f.Time.Format(time.StampMilli), f.Device, f.Request, f.Reason, f.Error)
		}
	}
	for i, lb := range e.serveLogs {
		e.t.Logf("fleet serve %d's log, its first and last records:\n%s", i, strings.Join(lb.Lines(), "\n"))
	}
	if l := e.broker.Log(); l != "" {
		e.t.Logf("the broker's log, its end:\n%s", l[max(0, len(l)-4000):])
	}
	if s := e.broker.Dump(); s != "" {
		e.t.Logf("the broker's clients and shared subscription groups:\n%s", s)
	}
	if e.fleet == nil {
		return
	}
	for _, d := range e.fleet.Devices {
		st, err := d.Status(e.ctx)
		e.t.Logf("device %s: active %q, journal %+v, err %v", d.ID, d.Active(), st.Journal, err)
		for _, l := range d.Log() {
			e.t.Logf("  %s", l)
		}
	}
}

// rollout starts one and waits for it to end; it returns the final record
// and the assigned counts it went through.
func (e *simEnv) rollout(r fleet.Rollout, d time.Duration) (*fleet.Rollout, []int) {
	e.t.Helper()
	if err := e.op.StartRollout(e.ctx, r); err != nil {
		e.t.Fatal(err)
	}
	var steps []int
	var last *fleet.Rollout
	e.waitFor("rollout "+r.ID+" ends", d, func() bool {
		last = e.op.View().Rollout(r.ID)
		if last == nil || !last.Started {
			return false
		}
		if len(steps) == 0 || steps[len(steps)-1] != last.Assigned {
			steps = append(steps, last.Assigned)
		}
		return last.Done()
	})
	if last.State == fleet.RolloutHalted { // what the devices said, for the test's reader
		for _, id := range slices.Sorted(maps.Keys(e.op.View().Devices())) {
			if u := e.op.View().Devices()[id].Update; u != nil {
				e.t.Logf("rollout %s halted; %s: active %s, %s %s, last event %s %s %s", r.ID, id, u.Active, u.Phase, u.Version, u.LastEvent, u.Refused, u.Reason)
			}
		}
	}
	return last, steps
}

func (e *simEnv) install1() {
	e.t.Helper()
	r, _ := e.rollout(fleet.Rollout{ID: "install-1", Model: model, Version: "1", Waves: []int{100}, SuccessPercent: 100}, 3*time.Minute)
	if r.State != fleet.RolloutCompleted {
		e.t.Fatalf("install of 1: %s (%s)", r.State, r.Reason)
	}
}

// TestRolloutWaves: devices updated in three waves (10, 50, 100 %); every
// device ends on the new version, the waves were taken in order, and the
// figures (time, bytes per device against bytes changed, broker messages
// per device) are logged.
func TestRolloutWaves(t *testing.T) {
	n := 100
	if testing.Short() {
		n = 10
	}
	e := newSimEnv(t, n)
	e.install1()
	before := map[string]int64{}
	for _, d := range e.fleet.Devices {
		before[d.ID] = d.BytesFetched()
	}
	recv0, sent0 := e.sysCounters()
	rel2 := e.publish(nil, "2", "model.layers.1.", false)
	start := time.Now()
	r, steps := e.rollout(fleet.Rollout{ID: "r2", Model: model, Version: "2", Waves: []int{10, 50, 100}, SuccessPercent: 100}, 5*time.Minute)
	took := time.Since(start)
	if r.State != fleet.RolloutCompleted {
		t.Fatalf("rollout: %s (%s)", r.State, r.Reason)
	}
	want := []int{(10*n + 99) / 100, (50*n + 99) / 100, n}
	if !slices.Equal(steps, want) {
		t.Errorf("assigned devices went %v, want the waves %v", steps, want)
	}
	if v := e.fleet.Versions(); v["2"] != n {
		t.Fatalf("versions after the rollout: %v", v)
	}
	var fetched int64
	for _, d := range e.fleet.Devices {
		fetched += d.BytesFetched() - before[d.ID]
	}
	changed := changedBytes(e.published["1"], rel2)
	recv1, sent1 := e.sysCounters()
	t.Logf("rolled %s@2 (one layer changed: %d bytes of %d) to %d devices in %v; bytes fetched per device %.0f = %.2fx the bytes changed; broker messages per device update: %.1f received, %.1f sent",
		model, changed, releaseBytes(rel2), n, took.Round(time.Millisecond), float64(fetched)/float64(n), float64(fetched)/float64(n)/float64(changed),
		float64(recv1-recv0)/float64(n), float64(sent1-sent0)/float64(n))
	var st fleet.ServeStats
	for _, s := range e.servers {
		st = s.Stats()
	}
	t.Logf("fleet serve: %d meta and %d chunk requests, %d chunk bytes, %d director writes, last decision pass %v",
		st.MetaRequests, st.ChunkRequests, st.ChunkBytes, st.DirectorWrites, st.DecisionTime)
}

// TestRolloutFleet runs the failure cases on one small fleet, in order:
// a release failing its health check on the canaries halts the rollout by
// itself; a rollout whose leading fleet serve instance is killed mid-way
// completes under the other, and a device offline throughout catches up
// when it returns; a compromised director assigning a target the release
// keys never signed is refused by every device.
func TestRolloutFleet(t *testing.T) {
	const n = 10
	e := newSimEnv(t, n)
	e.install1()

	t.Run("HaltOnCanaryFailure", func(t *testing.T) {
		e.publish(nil, "2", "model.layers.0.", true)
		r, _ := e.rollout(fleet.Rollout{ID: "bad-2", Model: model, Version: "2", Waves: []int{20, 50, 100}}, 3*time.Minute)
		if r.State != fleet.RolloutHalted || r.Assigned != 2 {
			t.Fatalf("rollout %s with %d assigned (%s); want halted after the 2 canaries", r.State, r.Assigned, r.Reason)
		}
		canaries := r.Targets[:r.Assigned]
		// The rollout halts on the first failure; a canary still
		// downloading then loses its assignment and abandons the update.
		// Both canaries settle: one fails its check, which halts the
		// rollout; the other may still be checking then, and fails or
		// abandons after (waking on the view only at the first failure
		// raced it under load).
		e.waitFor("a canary reports the failed check and both canaries settle", time.Minute, func() bool {
			if r.Counts(e.op.View().Devices())[fleet.StepFailed] < 1 {
				return false
			}
			for _, d := range e.fleet.Devices {
				if !slices.Contains(canaries, d.ID) {
					continue
				}
				st, err := d.Status(e.ctx)
				if err != nil || st.Journal.Version == "2" && st.Journal.Phase != update.PhaseFailed && st.Journal.Phase != update.PhaseAbandoned {
					return false
				}
			}
			return true
		})
		for _, d := range e.fleet.Devices {
			st, err := d.Status(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d.Active() != "1" {
				t.Errorf("%s runs %q after a halted rollout", d.ID, d.Active())
			}
			if slices.Contains(canaries, d.ID) {
				if st.Journal.Version == "2" && st.Journal.Phase != update.PhaseFailed && st.Journal.Phase != update.PhaseAbandoned {
					t.Errorf("canary %s journal %+v, want failed or abandoned on 2", d.ID, st.Journal)
				}
			} else if st.Journal.Version == "2" {
				t.Errorf("%s, beyond the canary wave, got release 2: journal %+v", d.ID, st.Journal)
			}
		}
		t.Logf("halted: %s", r.Reason)
	})

	t.Run("FailoverAndOfflineDevice", func(t *testing.T) {
		// a leads, then b joins; a reaches the broker through a proxy,
		// so killing it is a dropped TCP connection: the broker publishes
		// the wills of its connections, as for a SIGKILLed process. (b
		// starts once a holds the claim: started together, either may
		// win it, and under load b sometimes did.)
		proxy := newProxy(t, e.broker.URL())
		for _, s := range e.servers {
			s.Close()
		}
		a := e.serveCfg(fleet.ServeConfig{Broker: proxy.url, Fleet: "f", Instance: "a", Repo: e.repoDir, Keys: []string{e.keys}, Tick: 200 * time.Millisecond})
		e.waitOn("a leads", time.Minute, a.LeaderChanged, func() bool { return a.Stats().Leader })
		b := e.serve("b", true)
		e.waitFor("both instances online", 30*time.Second, func() bool { return len(e.op.View().Instances()) == 2 })

		off := e.fleet.Devices[n-1]
		if err := off.Close(); err != nil {
			t.Fatal(err)
		}
		e.publish(nil, "3", "model.layers.1.", false)
		if err := e.op.StartRollout(e.ctx, fleet.Rollout{ID: "r3", Model: model, Version: "3", Waves: []int{10, 50, 100}, SuccessPercent: 80}); err != nil {
			t.Fatal(err)
		}
		e.waitFor("the second wave starts", 2*time.Minute, func() bool {
			r := e.op.View().Rollout("r3")
			return r != nil && r.Wave >= 1
		})
		proxy.cut()
		a.Close()
		var last *fleet.Rollout
		e.waitFor("r3 completes under b", 3*time.Minute, func() bool {
			last = e.op.View().Rollout("r3")
			return last.Done()
		})
		if last.State != fleet.RolloutCompleted || !b.Stats().Leader {
			t.Fatalf("r3 %s (%s), b leads: %v", last.State, last.Reason, b.Stats().Leader)
		}
		// Completed at 80 %: the rest of the online devices are assigned
		// and finish on their own.
		e.waitFor("every online device runs 3", 2*time.Minute, func() bool {
			for _, d := range e.fleet.Devices[:n-1] {
				if d.Active() != "3" {
					return false
				}
			}
			return true
		})
		if err := e.fleet.Restart(e.ctx, n-1); err != nil {
			t.Fatal(err)
		}
		e.waitFor("the device that was offline runs 3", 2*time.Minute, func() bool { return e.fleet.Devices[n-1].Active() == "3" })
	})

	t.Run("CompromisedDirector", func(t *testing.T) {
		// Only a serve-only instance runs: nobody re-signs the director
		// but the attacker.
		for _, s := range e.servers {
			s.Close()
		}
		e.serve("c", false)
		r, err := fleet.Open(e.repoDir, fleet.InitOptions{}, nil, e.keys)
		if err != nil {
			t.Fatal(err)
		}
		sha := make([]byte, 32)
		if err := r.AssignUnsigned(update.TargetPath(model, "99"), 12345, sha); err != nil {
			t.Fatal(err)
		}
		for _, d := range e.fleet.Devices {
			if err := e.nudge(d.ID); err != nil {
				t.Fatal(err)
			}
		}
		e.waitFor("every device refused the unsigned target", 2*time.Minute, func() bool {
			for _, d := range e.op.View().Devices() {
				if d.Update == nil || !strings.Contains(d.Update.Refused, "tiny/99") {
					return false
				}
			}
			return true
		})
		for _, d := range e.fleet.Devices {
			if d.Active() != "3" {
				t.Errorf("%s runs %q after the compromised assignment", d.ID, d.Active())
			}
		}
		d := e.op.View().Devices()["dev-000"]
		t.Logf("dev-000 refused: %s", d.Update.Refused)
	})
}

// nudge sends a device the update check command, as the leader does.
func (e *simEnv) nudge(dev string) error {
	c, err := link.Open(e.ctx, link.Config{Broker: e.broker.URL(), Fleet: "f", Device: "_test-nudge", CleanSession: true}, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.WaitConnected(e.ctx); err != nil {
		return err
	}
	return c.Publish(e.ctx, link.NewTopics("f", dev).Cmd("update"), 1, false, []byte(`{"id":"n1","args":{"action":"check"}}`))
}

// sysCounters reads mosquitto's $SYS message counters (every second with
// sys_interval 1).
func (e *simEnv) sysCounters() (recv, sent uint64) {
	e.t.Helper()
	c, err := link.Open(e.ctx, link.Config{Broker: e.broker.URL(), Fleet: "f", Device: "_test-sys", CleanSession: true}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	// A new subscription first gets the retained value, up to one
	// publishing interval old: only the broker's next publication (not
	// retained) counts what happened before this call.
	got := make(chan struct{}, 2)
	for _, topic := range []string{"$SYS/broker/messages/received", "$SYS/broker/messages/sent"} {
		once := new(sync.Once)
		if err := c.Subscribe(e.ctx, topic, 0, func(m link.Message) {
			if m.Retained {
				return
			}
			v, _ := strconv.ParseUint(string(m.Payload), 10, 64)
			e.sysMu.Lock()
			if m.Topic == "$SYS/broker/messages/received" {
				e.sysRecv = v
			} else {
				e.sysSent = v
			}
			e.sysMu.Unlock()
			once.Do(func() { got <- struct{}{} })
		}); err != nil {
			e.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	for range 2 {
		select {
		case <-got:
		case <-ctx.Done():
			e.t.Fatal("no $SYS counters from the broker")
		}
	}
	e.sysMu.Lock()
	defer e.sysMu.Unlock()
	return e.sysRecv, e.sysSent
}

func changedBytes(old, rel *update.Release) int64 {
	have := map[store.Digest]bool{}
	for _, f := range old.Files {
		for _, c := range f.Chunks {
			have[c.SHA256] = true
		}
	}
	var n int64
	seen := map[store.Digest]bool{}
	for _, f := range rel.Files {
		for _, c := range f.Chunks {
			if !have[c.SHA256] && !seen[c.SHA256] {
				seen[c.SHA256] = true
				n += c.Size
			}
		}
	}
	return n
}

func releaseBytes(rel *update.Release) int64 {
	var n int64
	for _, f := range rel.Files {
		n += f.Size
	}
	return n
}

// proxy forwards TCP connections to the broker until cut, which drops
// every connection without an MQTT DISCONNECT (what a killed process
// leaves behind).
type proxy struct {
	url string
	ln  net.Listener
	mu  sync.Mutex
	cs  []net.Conn
	wg  sync.WaitGroup
}

func newProxy(t *testing.T, brokerURL string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := brokerURL[len("tcp://"):]
	p := &proxy{url: "tcp://" + ln.Addr().String(), ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.cs = append(p.cs, c, u)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(u, c); u.Close() }()
			go func() { defer p.wg.Done(); io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.cs {
		c.Close()
	}
	p.cs = nil
	p.mu.Unlock()
	p.wg.Wait()
}
