package month_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/device/fleettest"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
	"github.com/edgeinfer/edgeinfer/update/updatetest"
)

const (
	model     = "tiny"
	fleetName = "month"
	// capBytes is every device's download cap. It is low enough that a
	// changed layer takes seconds, so the 10-s windows see the cap work.
	capBytes = 64 << 10
)

func TestMain(m *testing.M) {
	if k := os.Getenv(childEnv); k != "" {
		os.Exit(runChild(k))
	}
	os.Exit(m.Run())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// proc is a child process: a device or the fleet server.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	out  string // its stdout, once it exited
}

// life is the test's world.
type life struct {
	t       *testing.T
	ctx     context.Context
	dir     string
	broker  *mosquittotest.Broker
	obs     *observer
	op      *fleet.Client
	rng     *rand.Rand
	base    childConfig
	devs    []string
	labels  []map[string]string
	procs   map[string]*proc
	repo    *fleet.Repository
	kills   []string
	disk    map[int][]int64 // release → each device's directory after it (blocks used)
	size    map[int][]int64 // release → the same, its files' sizes
	started time.Time
}

func (l *life) start(kind, name string, c childConfig) {
	l.t.Helper()
	b, _ := json.Marshal(c)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+kind, configEnv+"="+string(b))
	logf, err := os.OpenFile(filepath.Join(l.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		l.t.Fatal(err)
	}
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(p.done)
		defer logf.Close()
		sc := bufio.NewScanner(stdout)
		var out strings.Builder
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
				continue
			}
			out.WriteString(sc.Text() + "\n")
		}
		_ = cmd.Wait()
		p.out = out.String()
	}()
	select {
	case <-ready:
	case <-p.done:
		l.t.Fatalf("%s exited before it was ready: see %s", name, logf.Name())
	case <-time.After(2 * time.Minute):
		l.t.Fatalf("%s not ready after 2 minutes", name)
	}
	l.procs[name] = p
}

// stop ends a child: SIGTERM is a clean stop, SIGKILL a power cut.
func (l *life) stop(name string, sig syscall.Signal) *proc {
	l.t.Helper()
	p := l.procs[name]
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		l.t.Errorf("%s did not stop on %v within a minute", name, sig)
	}
	if sig == syscall.SIGTERM && p.cmd.ProcessState.ExitCode() != 0 {
		l.t.Errorf("%s: a clean stop exited %d (see %s.log)", name, p.cmd.ProcessState.ExitCode(), name)
	}
	delete(l.procs, name)
	return p
}

func (l *life) deviceConfig(i int) childConfig {
	c := l.base
	c.Index, c.ID, c.Labels = i, l.devs[i], l.labels[i]
	return c
}

func (l *life) startDevice(i int) { l.start("device", l.devs[i], l.deviceConfig(i)) }
func (l *life) startServe()       { l.start("serve", "serve", l.base) }

// setClock moves device i's clock by offset (0: the true time).
func (l *life) setClock(i int, offset time.Duration) {
	l.t.Helper()
	dir := filepath.Join(l.dir, "devices", l.devs[i])
	if err := os.WriteFile(clockFile(dir), []byte(strconv.FormatInt(int64(offset/time.Second), 10)), 0o644); err != nil {
		l.t.Fatal(err)
	}
}

func (l *life) note(format string, args ...any) {
	s := fmt.Sprintf("%6.1fs  ", time.Since(l.started).Seconds()) + fmt.Sprintf(format, args...)
	l.t.Log(s)
}

// waitFor waits until ok holds, looking again at every message the
// operator's view or the observer takes.
func (l *life) waitFor(what string, d time.Duration, ok func() bool) bool {
	l.t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		a, b := l.op.View().Changed(), l.obs.wake()
		if ok() {
			return true
		}
		select {
		case <-a:
		case <-b:
		case <-deadline.C:
			l.t.Errorf("%s: not within %v", what, d)
			return false
		case <-l.ctx.Done():
			l.t.Fatal(l.ctx.Err())
		}
	}
}

// pause waits d: the length of an outage or of a device's time offline,
// which is the scenario itself, not a wait for something to happen.
func (l *life) pause(d time.Duration) {
	select {
	case <-time.After(d):
	case <-l.ctx.Done():
	}
}

func (l *life) active(dev string) string {
	if d := l.op.View().Devices()[dev]; d != nil && d.Update != nil {
		return d.Update.Active
	}
	return ""
}

// previous is the version the device reports before its active one.
func (l *life) previous(dev string) string {
	if d := l.op.View().Devices()[dev]; d != nil && d.Update != nil {
		return d.Update.Previous
	}
	return ""
}

// publish builds release k (one layer new, from seed k) and signs it.
func (l *life) publish(k int, bad bool) {
	l.t.Helper()
	dir := filepath.Join(l.dir, "bundles", strconv.Itoa(k))
	layer := "model.layers." + strconv.Itoa(k%2) + "."
	if err := fleettest.TinyRelease(l.ctx, dir, model, strconv.Itoa(k), layer, uint64(k)); err != nil {
		l.t.Fatal(err)
	}
	if err := fleettest.SetHealth(l.ctx, dir, 6, bad); err != nil {
		l.t.Fatal(err)
	}
	if _, _, err := l.repo.Publish(l.ctx, dir, fleet.ReleaseOptions{}); err != nil {
		l.t.Fatal(err)
	}
}

// rollout rolls release k out to every device and waits for it to end.
func (l *life) rollout(k int, success int, during func()) *fleet.Rollout {
	l.t.Helper()
	id := "r" + strconv.Itoa(k)
	if err := l.op.StartRollout(l.ctx, fleet.Rollout{ID: id, Model: model, Version: strconv.Itoa(k), Waves: []int{100},
		SuccessPercent: success, HaltPercent: 50, WindowMS: (4 * time.Minute).Milliseconds()}); err != nil {
		l.t.Fatal(err)
	}
	if during != nil {
		during()
	}
	var r *fleet.Rollout
	l.waitFor("rollout "+id+" ends", 5*time.Minute, func() bool {
		r = l.op.View().Rollout(id)
		return r != nil && r.Done()
	})
	if r == nil {
		l.t.Fatalf("rollout %s never started", id)
	}
	return r
}

// killDuring SIGKILLs device i at a random moment of an update (the
// first 6 s after the rollout starts: download, staging, the swap or the
// journal write) and starts it again.
func (l *life) killDuring(i, k int) {
	l.t.Helper()
	l.pause(time.Duration(l.rng.Int64N(int64(6 * time.Second))))
	last := l.obs.lastEvent(l.devs[i])
	where := "before the update started"
	if last.Version == strconv.Itoa(k) {
		where = "after " + string(last.Kind)
		if last.Kind == update.EventDownloading {
			where = fmt.Sprintf("downloading (%d of %d bytes)", last.Done, last.Total)
		}
	}
	l.stop(l.devs[i], syscall.SIGKILL)
	l.kills = append(l.kills, fmt.Sprintf("%s in release %d, %s", l.devs[i], k, where))
	l.note("SIGKILL %s %s", l.devs[i], where)
	l.startDevice(i)
}

// TestMonth is a month of a fleet's life: see the package comment.
func TestMonth(t *testing.T) {
	orttest.Need(t)
	if testing.Short() {
		t.Skip("a month of releases takes minutes; without -short it runs (make month)")
	}
	releases := envInt("EDGEINFER_MONTH_RELEASES", 32)
	ndev := envInt("EDGEINFER_MONTH_DEVICES", 4)
	if releases < 30 || ndev < 4 {
		t.Fatalf("the timeline needs at least 30 releases and 4 devices (EDGEINFER_MONTH_RELEASES=%d, EDGEINFER_MONTH_DEVICES=%d)", releases, ndev)
	}
	seed := uint64(envInt("EDGEINFER_MONTH_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("seed %d (EDGEINFER_MONTH_SEED=%d replays the kill points)", seed, seed)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &life{t: t, ctx: ctx, dir: t.TempDir(), rng: rand.New(rand.NewPCG(seed, 1)), procs: map[string]*proc{}, started: time.Now(),
		disk: map[int][]int64{}, size: map[int][]int64{}}
	t.Cleanup(func() {
		for name := range l.procs {
			l.stop(name, syscall.SIGKILL)
		}
	})
	l.broker = mosquittotest.Start(t, mosquittotest.Options{Persistence: true})
	repoDir, keys := filepath.Join(l.dir, "repo"), filepath.Join(l.dir, "keys")
	var err error
	if l.repo, err = fleet.Init(repoDir, keys, keys, fleet.InitOptions{Director: true}, nil); err != nil {
		t.Fatal(err)
	}
	l.base = childConfig{Broker: l.broker.URL(), Fleet: fleetName, Dir: filepath.Join(l.dir, "devices"), Repo: repoDir, Keys: keys,
		ImageRoot: l.repo.RootPath(update.RepoImage), DirectorRoot: l.repo.RootPath(update.RepoDirector),
		CapBytesPerSec: capBytes, TelemetryMS: 2000, CheckMS: 15000, LoadMS: 3000}
	for i := range ndev {
		l.devs = append(l.devs, fmt.Sprintf("dev-%03d", i))
		site := "a"
		if i >= ndev/2 {
			site = "b"
		}
		l.labels = append(l.labels, map[string]string{"site": site})
	}
	if l.obs, err = newObserver(l.broker.URL(), fleetName); err != nil {
		t.Fatal(err)
	}
	defer l.obs.close()
	if l.op, err = fleet.Dial(ctx, fleet.ClientConfig{Broker: l.broker.URL(), Fleet: fleetName}); err != nil {
		t.Fatal(err)
	}
	defer l.op.Close()
	l.startServe()
	for i := range ndev {
		l.startDevice(i)
	}
	l.waitFor("every device reports its update state", 2*time.Minute, func() bool {
		n := 0
		for _, d := range l.op.View().Devices() {
			if d.Update != nil {
				n++
			}
		}
		return n == ndev
	})

	// The timeline. want is the release each device should run: what the
	// fleet assigned it last, or what an operator rolled it back to.
	want := make([]int, ndev)
	bad := map[int]bool{5: true, 13: true, 22: true, releases - 3: true}
	const offline = 3 // device offline across releases 24–27
	for k := 1; k <= releases; k++ {
		isBad := bad[k]
		l.publish(k, isBad)
		success := 75
		if k == 1 || k == releases {
			success = 100
		}
		// Before the rollout.
		switch k {
		case 4:
			l.note("clean restart of %s", l.devs[2])
			l.stop(l.devs[2], syscall.SIGTERM)
			l.startDevice(2)
		case 11:
			l.note("%s's clock jumps back to 1970 (a board without a real-time clock)", l.devs[2])
			l.setClock(2, -time.Since(time.Unix(0, 0)))
		case 13:
			l.setClock(2, 0)
			l.note("%s's clock is right again", l.devs[2])
		case 20:
			l.note("%s's clock jumps 10 days ahead", l.devs[0])
			l.setClock(0, 10*24*time.Hour)
		case 24:
			l.note("%s goes offline (SIGTERM) across releases 24–27", l.devs[offline])
			l.stop(l.devs[offline], syscall.SIGTERM)
		case 28:
			l.note("%s comes back", l.devs[offline])
			l.startDevice(offline)
		}
		var during func()
		switch {
		case k%4 == 3:
			i := l.rng.IntN(ndev)
			if k >= 24 && k <= 27 && i == offline {
				i = 0
			}
			during = func() { l.killDuring(i, k) }
		case k == 10:
			during = func() {
				l.waitFor("a device downloading release 10", time.Minute, func() bool {
					return slices.ContainsFunc(l.devs, func(d string) bool { return l.obs.seen(d, "10", update.EventDownloading) })
				})
				l.note("broker stops for 10 s mid-transfer (persistence on)")
				l.broker.Stop()
				l.pause(10 * time.Second)
				l.broker.Start()
			}
		case k == 18:
			during = func() {
				l.pause(time.Second)
				l.note("broker restarts without its persistence file (sessions and retained messages lost)")
				l.broker.Stop()
				l.broker.Forget()
				l.broker.Start()
			}
		case k == 14:
			during = func() {
				l.pause(time.Duration(l.rng.Int64N(int64(2 * time.Second))))
				l.note("fleet serve SIGKILLed mid-rollout, restarted after 1 s")
				l.stop("serve", syscall.SIGKILL)
				l.pause(time.Second)
				l.startServe()
			}
		}
		t0 := time.Now()
		r := l.rollout(k, success, during)
		for i := range ndev {
			if i == offline && k >= 24 && k <= 27 {
				if !isBad && r.State == fleet.RolloutCompleted {
					want[i] = k // assigned while away: it must catch up
				}
				continue
			}
			if !isBad && slices.Contains(r.Targets, l.devs[i]) {
				want[i] = k
			}
		}
		vs := make([]string, ndev)
		for i, d := range l.devs {
			vs[i] = l.active(d)
		}
		l.note("release %d%s: rollout %s in %.1f s (%s); devices on %v", k, map[bool]string{true: " (failing health check)"}[isBad],
			r.State, time.Since(t0).Seconds(), r.Reason, vs)
		if isBad && r.State != fleet.RolloutHalted {
			t.Errorf("release %d fails its health check, yet its rollout ended %s", k, r.State)
		}
		if !isBad && r.State != fleet.RolloutCompleted {
			t.Errorf("release %d: rollout %s (%s)", k, r.State, r.Reason)
			for id, d := range l.op.View().Devices() {
				if u := d.Update; u != nil {
					t.Logf("  %s: active %s, phase %s of %s, last event %s, refused %q (release %q), checked %s",
						id, u.Active, u.Phase, u.Version, u.LastEvent, u.Refused, u.RefusedVersion, u.Checked)
				}
			}
		}
		if k == 1 || k == 6 || k == 30 {
			// The disk is measured at rest: a rollout completes when enough
			// of its targets run the release, and a device still catching
			// up holds the release it downloads beside the two it keeps
			// (one bundle more, seen once after release 30).
			l.waitFor(fmt.Sprintf("every device on what the fleet intends after release %d", k), 2*time.Minute, func() bool {
				for i, d := range l.devs {
					if l.active(d) != strconv.Itoa(want[i]) {
						return false
					}
				}
				return true
			})
			for _, d := range l.devs {
				used, size := dirUsage(t, filepath.Join(l.dir, "devices", d))
				l.disk[k], l.size[k] = append(l.disk[k], used), append(l.size[k], size)
			}
		}
		// After the rollout.
		switch k {
		case 8:
			// An operator rolls back a device that runs the release (one
			// killed in release 7 may still be catching up).
			l.waitFor(l.devs[1]+" on 8", 2*time.Minute, func() bool { return l.active(l.devs[1]) == "8" })
			l.note("operator rolls %s back from 8", l.devs[1])
			back := l.previous(l.devs[1]) // 7, or older when a kill made it skip 7
			if err := l.op.Control(ctx, "r8", fleet.Control{Action: fleet.ActionRollback, Devices: []string{l.devs[1]}}); err != nil {
				t.Fatal(err)
			}
			want[1], _ = strconv.Atoi(back)
			l.waitFor(l.devs[1]+" back on "+back, 2*time.Minute, func() bool { return back != "" && l.active(l.devs[1]) == back })
		case 16:
			l.waitFor("site b on 16", 2*time.Minute, func() bool {
				for i := range ndev {
					if l.labels[i]["site"] == "b" && l.active(l.devs[i]) != "16" {
						return false
					}
				}
				return true
			})
			l.note("operator rolls segment site=b back from 16")
			// Each goes back to its own previous version: 15, or an older
			// one for a device that a kill made skip 15.
			back := map[int]string{}
			for i := range ndev {
				if l.labels[i]["site"] == "b" {
					back[i] = l.previous(l.devs[i])
				}
			}
			if err := l.op.Control(ctx, "r16", fleet.Control{Action: fleet.ActionRollback, Selector: map[string]string{"site": "b"}}); err != nil {
				t.Fatal(err)
			}
			for i, v := range back {
				if v == "" {
					t.Fatalf("%s on 16 has no previous version to roll back to", l.devs[i])
				}
				want[i], _ = strconv.Atoi(v)
				l.waitFor(l.devs[i]+" back on "+v, 2*time.Minute, func() bool { return l.active(l.devs[i]) == v })
			}
		case 21:
			l.setClock(0, 0)
			l.note("%s's clock is right again", l.devs[0])
		}
	}

	// Where every device ends: on the release the fleet intends.
	l.waitFor("every device on the release the fleet intends", 3*time.Minute, func() bool {
		for i, d := range l.devs {
			if l.active(d) != strconv.Itoa(want[i]) {
				return false
			}
		}
		return true
	})
	took := time.Since(l.started)
	for name := range l.procs {
		if name != "serve" {
			l.stop(name, syscall.SIGTERM)
		}
	}
	serve := l.stop("serve", syscall.SIGTERM)
	l.report(want, took, releases, serve)
}

// report prints the figures of the month and checks each against its
// bound.
func (l *life) report(want []int, took time.Duration, releases int, serve *proc) {
	t := l.t
	t.Logf("a month of %d releases on %d devices in %.0f s (%s)", releases, len(l.devs), took.Seconds(), machine())
	for _, k := range l.kills {
		t.Logf("SIGKILL: %s", k)
	}
	bundle := dirBytes(t, filepath.Join(l.dir, "bundles", strconv.Itoa(releases)))
	t.Logf("%-8s %7s %6s %9s %5s %5s  %-22s %-15s %9s %8s %8s %9s", "device", "release", "wanted", "messages", "lost", "dups",
		"disk÷bundle 1/6/30/end", "files 6/30", "wire KiB", "÷changed", "cap 10 s", "verifies")
	for i, d := range l.devs {
		got := l.active(d)
		dl := l.obs.delivery(d)
		dir := filepath.Join(l.dir, "devices", d)
		end := dirBytes(t, dir)
		ratio := func(n int64) float64 { return float64(n) / float64(bundle) }
		wire, worst := l.obs.wire(d, capBytes)
		changed := l.obs.changedBytes(d)
		byChange := float64(wire) / float64(max(changed, 1))
		versions, verr := verifyStore(l.ctx, filepath.Join(dir, "models.db"))
		verdict := fmt.Sprintf("yes (%d)", versions)
		if verr != nil {
			verdict = "NO"
		}
		t.Logf("%-8s %7s %6d %9d %5d %5d  %4.2f/%4.2f/%4.2f/%4.2f    %4.2f/%4.2f       %9.1f %8.3f %7.2f× %9s", d, got, want[i], dl.distinct, dl.missing, dl.dups,
			ratio(l.disk[1][i]), ratio(l.disk[6][i]), ratio(l.disk[30][i]), ratio(end), ratio(l.size[6][i]), ratio(l.size[30][i]),
			float64(wire)/1024, byChange, worst, verdict)
		for _, r := range l.obs.refusals(d) {
			t.Logf("  %s %s", d, r)
		}
		for _, a := range dl.around {
			t.Logf("  %s missing: %s", d, a)
		}
		if got != strconv.Itoa(want[i]) {
			t.Errorf("%s runs %q, the fleet intends %d", d, got, want[i])
		}
		if dl.missing > 0 {
			t.Errorf("%s: %d of its %d messages never arrived (seq %v)", d, dl.missing, dl.max, dl.gaps)
		}
		// bbolt grows its file to a power of two and reuses freed pages
		// inside it: the blocks used fill the file towards its size, and
		// the size is what must not grow with the releases.
		if l.size[30][i] > l.size[6][i]*115/100 {
			t.Errorf("%s: its files grew from %d bytes after release 6 to %d after release 30", d, l.size[6][i], l.size[30][i])
		}
		if versions > 2 {
			t.Errorf("%s: its store keeps %d versions; retention keeps the active and the previous one", d, versions)
		}
		if byChange > 1.1 {
			t.Errorf("%s: %d bytes on the wire for %d bytes that changed (%.2f×, bound 1.1×)", d, wire, changed, byChange)
		}
		if worst > 1.1 {
			t.Errorf("%s: a 10-s window carried %.2f× the cap", d, worst)
		}
		if verr != nil {
			t.Errorf("%s: store does not verify: %v", d, verr)
		}
	}
	// The outage alone: the chunk bytes each device was sent between
	// its offer of release 10 and the end of its download (which the
	// broker's 10-s stop cuts) against what it lacked of 10.
	var sent, lacked int64
	var who []string
	for _, d := range l.devs {
		from, to, ok := l.obs.span(d, "10")
		if !ok {
			continue
		}
		sent += l.obs.wireBetween(d, from, to)
		lacked += l.obs.total(d, "10")
		who = append(who, d)
	}
	t.Logf("release 10 through a 10-s broker outage mid-transfer (%s): %d bytes on the wire for %d missing (%.3f×)",
		strings.Join(who, ", "), sent, lacked, float64(sent)/float64(max(lacked, 1)))
	if r := float64(sent) / float64(max(lacked, 1)); r > 1.1 {
		t.Errorf("through the outage %.2f× the bytes missing went over the wire (bound 1.1×)", r)
	}
	// Where the disk goes, on the first device: the store (active and
	// previous version), the copy the engine loads, the outbox, the
	// signed metadata.
	parts := map[string]int64{}
	dir := filepath.Join(l.dir, "devices", l.devs[0])
	for _, p := range []string{"models.db", "models.db.models", "outbox.db", "tuf"} {
		parts[p] = dirBytes(t, filepath.Join(dir, p))
	}
	t.Logf("%s's directory: store %.2f, exported copy %.2f, outbox %.2f, TUF metadata %.2f bundles (one bundle %d bytes)", l.devs[0],
		float64(parts["models.db"])/float64(bundle), float64(parts["models.db.models"])/float64(bundle),
		float64(parts["outbox.db"])/float64(bundle), float64(parts["tuf"])/float64(bundle), bundle)
	t.Logf("cap %d B/s; fleet serve at its stop: %s", capBytes, strings.TrimSpace(serve.out))
}

// dirBytes is what dir takes on disk, as du counts it.
func dirBytes(t *testing.T, dir string) int64 {
	_, used := updatetest.DiskUse(t, dir)
	return used
}

// dirUsage is what dir takes on disk (blocks) and its files' sizes.
func dirUsage(t *testing.T, dir string) (used, size int64) {
	size, used = updatetest.DiskUse(t, dir)
	return used, size
}

// verifyStore re-hashes the store and returns how many versions it keeps.
func verifyStore(ctx context.Context, path string) (int, error) {
	st, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		return 0, err
	}
	defer st.Close()
	r, err := st.Verify(ctx, nil)
	return r.Versions, err
}

var machineOnce = sync.OnceValue(func() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown CPU"
})

func machine() string { return machineOnce() }
