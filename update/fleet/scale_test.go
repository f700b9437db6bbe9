package fleet_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"github.com/edgeinfer/edgeinfer/update/wire"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/fleet"
	"github.com/edgeinfer/edgeinfer/update/updatetest"
)

// TestScaleSim is the protocol-level fleet simulation: EDGEINFER_FLEET_SIM
// devices, each a real MQTT connection (the link) that publishes its birth,
// retained update state and telemetry, and on the fleet's nudge fetches the
// director's metadata chain and the release's changed chunks over the
// request topics, then reports the new version — no engine, no store, no
// signature checks (TestRolloutFleet runs those). One mosquitto and one
// `edgeinfer fleet serve` process (built here, so its CPU and memory are
// its own) run a rollout in waves 1,10,50,100. The figures are logged; the
// test fails only if the rollout does not complete. The broker runs with
// max_inflight_messages 0, as the figures in SCALE.md were taken (an
// earlier tree stalled at 10,000 devices with mosquitto's default window
// of 20, and the current one does not: SERVING.md);
// EDGEINFER_FLEET_SIM_BROKER replaces that line.
//
//	EDGEINFER_FLEET_SIM=10000 go test -run TestScaleSim -v ./update/fleet/
func TestScaleSim(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("EDGEINFER_FLEET_SIM"))
	if n <= 0 || testing.Short() {
		t.Skip("a measurement: set EDGEINFER_FLEET_SIM=<devices>")
	}
	// A process here may hold 20,000 open files (a hard limit this
	// container cannot raise), a broker as much as the devices: past
	// per devices, they connect to edge brokers bridged to the core one
	// that fleet serve uses, and run in processes of per devices each.
	per := cmp.Or(envInt("EDGEINFER_FLEET_SIM_PER_BROKER"), 15000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	brokerConf := "sys_interval 1\nmax_queued_messages 1000000\n" + cmp.Or(os.Getenv("EDGEINFER_FLEET_SIM_BROKER"), "max_inflight_messages 0\n")
	b := mosquittotest.Start(t, mosquittotest.Options{Extra: brokerConf})
	brokers, edges := []*mosquittotest.Broker{b}, []*mosquittotest.Broker{b}
	if n > per {
		edges = nil
		for k := range (n + per - 1) / per {
			// What devices publish goes to the core; the core sends an
			// edge the fleet's own topics and every device's commands
			// and responses (a few hundred bytes a device per rollout
			// with bulk data over HTTPS), not the devices' states. The
			// two sets are disjoint: a topic in both would loop from
			// edge to edge through the core (330 packets a device here),
			// and each bridge has a client id of its own (by default they
			// share one and take each other's session in turn).
			var topics strings.Builder
			for _, out := range []string{"status", "update", "events", "telemetry", "req/#", "cmdres/#"} {
				fmt.Fprintf(&topics, "topic edgeinfer/v1/f/+/%s out 1\n", out)
			}
			for _, in := range []string{"_fleet/#", "+/cmd/#", "+/res/#"} {
				fmt.Fprintf(&topics, "topic edgeinfer/v1/f/%s in 1\n", in)
			}
			e := mosquittotest.Start(t, mosquittotest.Options{Extra: brokerConf + fmt.Sprintf("connection core\naddress 127.0.0.1:%d\nremote_clientid edge-%d\n", b.Port, k) +
				topics.String() + "cleansession true\nbridge_protocol_version mqttv311\n"})
			edges, brokers = append(edges, e), append(brokers, e)
		}
	}
	repoDir, keys := t.TempDir(), t.TempDir()
	r, err := fleet.Init(repoDir, keys, keys, fleet.InitOptions{Director: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := map[string][]byte{"model.onnx": randBytes(1, 2<<20), "layer0.bin": randBytes(2, 256<<10), "layer1.bin": randBytes(3, 256<<10)}
	rel1, _, err := r.Publish(ctx, writeBundle(t, "1", base), fleet.ReleaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base["layer1.bin"] = randBytes(4, 256<<10)
	rel2, _, err := r.Publish(ctx, writeBundle(t, "2", base), fleet.ReleaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delta := deltaChunks(rel1, rel2)

	// Bulk data (metadata and chunks) from nginx over HTTPS, the fleet's
	// default; EDGEINFER_FLEET_SIM_BULK=mqtt fetches it over the request
	// topics as a small fleet without a static host does.
	var bulkURL, caFile string
	via := "nginx over HTTPS"
	if os.Getenv("EDGEINFER_FLEET_SIM_BULK") == "mqtt" {
		via = "the broker's request topics"
	} else {
		ng := updatetest.StartNginx(t, repoDir)
		bulkURL, caFile = ng.URL, ng.CAFile
	}

	// fleet serve as its own process, built as a fleet manager is deployed:
	// without cgo. The fleet side needs no ONNX Runtime (runtime/cmd/edgeinfer/nocgo.go),
	// and the binary's text the kernel maps in is a fixed part of the peak
	// RSS: about 10 MiB for this build against 16 MiB for the cgo one.
	// EDGEINFER_FLEET_SIM_CGO=1 measures the cgo build instead.
	bin := filepath.Join(t.TempDir(), "edgeinfer")
	build := exec.Command("go", "build", "-o", bin, "github.com/edgeinfer/edgeinfer/runtime/cmd/edgeinfer")
	build.Env = append(os.Environ(), "CGO_ENABLED="+cmp.Or(os.Getenv("EDGEINFER_FLEET_SIM_CGO"), "0"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the CLI: %v\n%s", err, out)
	}
	serveArgs := []string{"fleet", "serve", "--broker", b.URL(), "--fleet", "f", "--repo", repoDir, "--keys", keys, "--instance", "a", "--stats-every", "1s"}
	if p := os.Getenv("EDGEINFER_FLEET_SIM_HEAP"); p != "" {
		serveArgs = append(serveArgs, "--heap-profile", p) // written when it stops
	}
	serve := exec.Command(bin, serveArgs...)
	stdout, _ := serve.StdoutPipe()
	if p := os.Getenv("EDGEINFER_FLEET_SIM_STDERR"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		serve.Stderr = f
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { serve.Process.Signal(syscall.SIGTERM); serve.Wait() }()
	var lastStats atomic.Value
	serveUp := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		up := serveUp
		for sc.Scan() {
			if up != nil && strings.Contains(sc.Text(), "connected and subscribed") {
				close(up)
				up = nil
			}
			if i := strings.IndexByte(sc.Text(), '{'); i >= 0 {
				var st fleet.ServeStats
				if json.Unmarshal([]byte(sc.Text()[i:]), &st) == nil {
					lastStats.Store(st)
				}
			}
		}
	}()
	// fleet serve at rest (connected, no device yet), then its memory
	// sampled through the run: VmHWM counts the binary's file pages too
	// (a fixed cost that depends on the page cache, not the fleet), so the
	// anonymous part, its heap, stacks and buffers, is the per-device figure.
	select {
	case <-serveUp:
	case <-time.After(time.Minute):
		t.Fatal("fleet serve did not connect within a minute")
	}
	atRest := procMem(t, serve.Process.Pid)
	var peakAnon atomic.Int64
	samplerDone := make(chan struct{})
	samplerCtx, stopSampler := context.WithCancel(ctx)
	go func() {
		defer close(samplerDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if m, ok := readProcMem(serve.Process.Pid); ok && m.Anon > peakAnon.Load() {
				peakAnon.Store(m.Anon)
			}
			select {
			case <-samplerCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	var brokerPids []int
	for _, br := range brokers {
		brokerPids = append(brokerPids, mosquittoPid(t, br.Port))
	}
	t.Logf("%d devices on %d broker(s) (%s), in %d process(es); metadata and chunks from %s", n, len(brokers),
		map[bool]string{true: "one", false: fmt.Sprintf("%d edges bridged to a core", len(edges))}[len(brokers) == 1], (n+per-1)/per, via)

	// The devices, in child processes of this test binary.
	start := time.Now()
	var hosts []*simHost
	for first := 0; first < n; first += per {
		h := startSimHost(t, simHostConfig{Broker: edges[first/per].URL(), First: first, Count: min(per, n-first), Delta: delta, BulkURL: bulkURL, CAFile: caFile})
		hosts = append(hosts, h)
	}
	for _, h := range hosts {
		h.waitUp(t)
	}
	connected := time.Since(start)

	// Status ingestion: an operator's client reads every retained record.
	start = time.Now()
	op, err := fleet.Dial(ctx, fleet.ClientConfig{Broker: b.URL(), Fleet: "f"})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	// The conditions below read every device: checked at most twice a
	// second, not at each of the 2N messages (quadratic at 100,000).
	throttled := func() <-chan struct{} { return throttle(ctx, op.View().Changed(), 500*time.Millisecond) }
	waitUntil(t, "the operator's view holds every device", 10*time.Minute, throttled, func() bool {
		k := 0
		for _, d := range op.View().Devices() {
			if d.Update != nil && d.Status != nil {
				k++
			}
		}
		return k == n
	})
	ingest := time.Since(start)
	onVersion := func(v string) int {
		k := 0
		for _, d := range op.View().Devices() {
			if d.Update != nil && d.Update.Active == v {
				k++
			}
		}
		return k
	}

	counters := func() (c [4]uint64) {
		for _, br := range brokers {
			r, s, bx, tx := sysCounters4(t, ctx, br.URL())
			c[0], c[1], c[2], c[3] = c[0]+r, c[1]+s, c[2]+bx, c[3]+tx
		}
		return c
	}
	brokerCPU := func() (c float64) {
		for _, p := range brokerPids {
			c += procCPU(t, p)
		}
		return c
	}
	c0 := counters()
	cpu0, cpuB0 := procCPU(t, serve.Process.Pid), brokerCPU()
	start = time.Now()
	if err := op.StartRollout(ctx, fleet.Rollout{ID: "r2", Model: "m", Version: "2", Waves: []int{1, 10, 50, 100}, SuccessPercent: 99, WindowMS: 30 * 60 * 1000}); err != nil {
		t.Fatal(err)
	}
	progress := time.NewTicker(15 * time.Second)
	defer progress.Stop()
	go func() {
		for range progress.C {
			ro := op.View().Rollout("r2")
			st, _ := lastStats.Load().(fleet.ServeStats)
			if ro != nil {
				t.Logf("%v: wave %d assigned %d, %d devices on 2; serve %d meta %d chunk requests, %d response bytes",
					time.Since(start).Round(time.Second), ro.Wave+1, ro.Assigned, onVersion("2"), st.MetaRequests, st.ChunkRequests, st.ResponseBytes)
			}
		}
	}()
	waitUntil(t, "the rollout completes", 60*time.Minute, throttled, func() bool {
		ro := op.View().Rollout("r2")
		return ro != nil && ro.Done()
	})
	waitUntil(t, "every device runs 2", 20*time.Minute, throttled, func() bool { return onVersion("2") == n })
	took := time.Since(start)
	cpu1, cpuB1 := procCPU(t, serve.Process.Pid), brokerCPU()
	c1 := counters()
	ro := op.View().Rollout("r2")
	if ro.State != fleet.RolloutCompleted {
		t.Fatalf("rollout %s: %s", ro.State, ro.Reason)
	}
	st, _ := lastStats.Load().(fleet.ServeStats)
	var deltaBytes int64
	for _, c := range delta {
		deltaBytes += c.Size
	}
	var sum simCounters
	for _, h := range hosts {
		c := h.stop(t)
		sum.ChunkBytes, sum.MetaBytes, sum.Retries = sum.ChunkBytes+c.ChunkBytes, sum.MetaBytes+c.MetaBytes, sum.Retries+c.Retries
		sum.LastErr = cmp.Or(sum.LastErr, c.LastErr)
	}
	var brokerHWM int64
	for _, p := range brokerPids {
		brokerHWM += procHWM(t, p)
	}
	t.Logf("devices %d: connected in %v; operator view of %d retained records in %v (%.0f records/s)", n, connected.Round(time.Millisecond),
		2*n, ingest.Round(time.Millisecond), float64(2*n)/ingest.Seconds())
	t.Logf("rollout 1,10,50,100 %% of a %d-byte delta (one 256 KiB layer of 2.5 MiB): %v wall; last decision pass %v; %d director writes",
		deltaBytes, took.Round(time.Millisecond), st.DecisionTime, st.DirectorWrites)
	t.Logf("device retries after a failed or timed-out check: %d", sum.Retries)
	if sum.LastErr != "" {
		t.Logf("a failed check: %s", sum.LastErr)
	}
	pd := func(v uint64) float64 { return float64(v) / float64(n) }
	t.Logf("per device update: broker messages (MQTT packets of any type, acknowledgements included, summed over the %d broker(s)) %.1f received, %.1f sent; broker bytes %.0f received, %.0f sent; chunk bytes %.0f, metadata bytes %.0f",
		len(brokers), pd(c1[0]-c0[0]), pd(c1[1]-c0[1]), pd(c1[2]-c0[2]), pd(c1[3]-c0[3]), float64(sum.ChunkBytes)/float64(n), float64(sum.MetaBytes)/float64(n))
	// A serve connection up without its request subscription was one
	// explanation of the old stall at mosquitto's default window (SCALE.md):
	// its connections and handler drops say whether anything of the kind
	// happened in this run.
	t.Logf("fleet serve: %d connection(s) to the broker, %d requests dropped by a full handler queue, %d failed, link error %q",
		st.Connects, st.HandlerDrops, st.Failed, st.LinkError)
	t.Logf("fleet serve: %d devices in its view, live Go heap %.1f MiB after its last collection (%.0f bytes a device)",
		st.Devices, float64(st.HeapLiveBytes)/(1<<20), float64(st.HeapLiveBytes)/float64(max(st.Devices, 1)))
	stopSampler()
	<-samplerDone
	t.Logf("fleet serve at rest (connected, before any device): RSS %.1f MiB, of which %.1f MiB the binary's and libraries' file pages and %.1f MiB anonymous",
		float64(atRest.RSS)/1024, float64(atRest.File)/1024, float64(atRest.Anon)/1024)
	t.Logf("fleet serve: peak anonymous memory (heap, stacks, buffers; sampled every 100 ms) %.1f MiB, %.2f KiB a device; above rest %.2f KiB a device",
		float64(peakAnon.Load())/1024, float64(peakAnon.Load())/float64(n), float64(peakAnon.Load()-atRest.Anon)/float64(n))
	t.Logf("fleet serve: CPU %.1f s over %.1f s (%.0f %% of a core), peak RSS %d MiB (%.2f KiB a device); mosquitto (%d): CPU %.1f s (%.0f %% of a core), peak RSS %d MiB; messages at the broker(s) %.0f/s",
		cpu1-cpu0, took.Seconds(), 100*(cpu1-cpu0)/took.Seconds(), procHWM(t, serve.Process.Pid)>>10, float64(procHWM(t, serve.Process.Pid))/float64(n),
		len(brokers), cpuB1-cpuB0, 100*(cpuB1-cpuB0)/took.Seconds(), brokerHWM>>10, float64(c1[0]-c0[0]+c1[1]-c0[1])/took.Seconds())
}

// throttle is changed, closed no sooner than gap from now (or when ctx
// ends, which ends its goroutine).
func throttle(ctx context.Context, changed <-chan struct{}, gap time.Duration) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		defer close(out)
		t := time.NewTimer(gap)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
		}
	}()
	return out
}

func envInt(name string) int { v, _ := strconv.Atoi(os.Getenv(name)); return v }

// simHostConfig is what a child process of TestScaleSim runs: Count
// devices sim-<First>... on Broker.
type simHostConfig struct {
	Broker, BulkURL, CAFile string
	First, Count            int
	Delta                   []store.Chunk
}

// simCounters are a child's devices' sums, reported when it stops.
type simCounters struct {
	ChunkBytes, MetaBytes, Retries int64
	LastErr                        string
}

// simHost is a running child process of simulated devices.
type simHost struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

const simChildEnv = "EDGEINFER_FLEET_SIM_CHILD"

func startSimHost(t *testing.T, c simHostConfig) *simHost {
	t.Helper()
	cfg, _ := json.Marshal(c)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestScaleSimChild$", "-test.v", "-test.timeout", "0")
	cmd.Env = append(os.Environ(), simChildEnv+"="+string(cfg))
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &simHost{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "SIMHOST "); ok {
				h.lines <- l
			}
		}
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return h
}

func (h *simHost) waitUp(t *testing.T) {
	t.Helper()
	l, ok := <-h.lines
	if !ok || l != "up" {
		t.Fatalf("a device host did not start its devices (%q)", l)
	}
}

func (h *simHost) stop(t *testing.T) simCounters {
	t.Helper()
	h.stdin.Close()
	var c simCounters
	l, ok := <-h.lines
	if rest, cut := strings.CutPrefix(l, "done "); !ok || !cut || json.Unmarshal([]byte(rest), &c) != nil {
		t.Errorf("a device host's report: %q", l)
	}
	return c
}

// TestScaleSimChild runs TestScaleSim's devices in a child process.
func TestScaleSimChild(t *testing.T) {
	raw := os.Getenv(simChildEnv)
	if raw == "" {
		t.Skip("runs only as a child process of TestScaleSim")
	}
	var c simHostConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var bulk update.Source
	if c.BulkURL != "" {
		src, err := update.OpenSource(c.BulkURL, c.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		// Devices of a host share one HTTP client (its connections): a TLS
		// handshake per device would measure this machine's CPU, not the
		// protocol; 64 connections a host keep within the test nginx's.
		hs := src.(update.HTTPSource)
		tr := hs.Client.Transport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = 64, 64
		hs.Client = &http.Client{Transport: tr}
		bulk = hs
	}
	devs := make([]*simDevice, c.Count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 100)
	for i := range c.Count {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d, err := startSimDevice(ctx, c.Broker, fmt.Sprintf("sim-%06d", c.First+i), c.Delta, bulk)
			if err != nil {
				t.Error(err)
				return
			}
			devs[i] = d
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	fmt.Println("SIMHOST up")
	io.Copy(io.Discard, os.Stdin) // until the parent closes it
	var sum simCounters
	for _, d := range devs {
		sum.ChunkBytes += d.chunkBytes.Load()
		sum.MetaBytes += d.metaBytes.Load()
		sum.Retries += d.retries.Load()
		if e, ok := d.lastErr.Load().(string); ok && sum.LastErr == "" {
			sum.LastErr = d.id + ": " + e
		}
	}
	b, _ := json.Marshal(sum)
	fmt.Println("SIMHOST done " + string(b))
	var cw sync.WaitGroup
	for _, d := range devs {
		cw.Go(func() { d.l.Close() })
	}
	cw.Wait()
}

// simDevice speaks the device's protocol with no engine or store.
type simDevice struct {
	id                    string
	l                     *link.Link
	delta                 []store.Chunk
	active                atomic.Value
	chunkBytes, metaBytes atomic.Int64
	retries               atomic.Int64
	lastErr               atomic.Value // string: the latest failed check's error
	kick                  chan struct{}
	// bulk, when set, is the static host metadata and chunks come from
	// (the broker then carries control only).
	bulk update.Source
}

func startSimDevice(ctx context.Context, broker, id string, delta []store.Chunk, bulk update.Source) (*simDevice, error) {
	d := &simDevice{id: id, delta: delta, kick: make(chan struct{}, 1), bulk: bulk}
	d.active.Store("1")
	l, err := link.Open(ctx, link.Config{Broker: broker, Fleet: "f", Device: id, KeepAlive: 120 * time.Second, QueueLen: 4,
		BackoffMin: time.Second, BackoffMax: 30 * time.Second, ConnectTimeout: 60 * time.Second}, func() link.Birth {
		return link.Birth{SDKVersion: update.SDKVersion, Board: "sim", Models: []link.ModelVersion{{Name: "m", Active: d.active.Load().(string)}}}
	})
	if err != nil {
		return nil, err
	}
	d.l = l
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := l.WaitConnected(wctx); err != nil {
		return nil, fmt.Errorf("%s: %w", id, err)
	}
	if err := l.Subscribe(ctx, l.Topics().Cmd(wire.CommandUpdate), 1, func(link.Message) {
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}); err != nil {
		return nil, err
	}
	if err := d.publishState(ctx); err != nil {
		return nil, err
	}
	go d.run(ctx)
	return d, nil
}

func (d *simDevice) publishState(ctx context.Context) error {
	b, _ := json.Marshal(wire.State{Schema: wire.StateSchema, Device: d.id, Fleet: "f", Board: "sim", Model: "m",
		Active: d.active.Load().(string), Phase: update.PhaseActive, Labels: map[string]string{"site": d.id[len(d.id)-1:]}, Time: time.Now().UTC().Format(time.RFC3339)})
	return d.l.Publish(ctx, wire.StateTopic(d.l.Topics()), 1, true, b)
}

func (d *simDevice) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		}
		// Retry until it works, backing off as a device's agent does: a
		// saturated fleet shows as time, not as devices giving up.
		for wait := time.Second; ctx.Err() == nil; wait = min(2*wait, 30*time.Second) {
			err := d.check(ctx)
			if err == nil {
				break
			}
			d.lastErr.Store(err.Error())
			d.retries.Add(1)
			time.Sleep(wait)
		}
	}
}

// check reads the director's shared timestamp and the device's own chain
// (timestamp, snapshot, targets: update.DeviceMetaPrefix) and, when it is
// assigned a newer version, fetches the delta's chunks.
func (d *simDevice) check(ctx context.Context) error {
	var ts struct {
		Signed struct {
			Meta map[string]struct{ Version int64 } `json:"meta"`
		} `json:"signed"`
	}
	if err := d.meta(ctx, "director/timestamp.json", &ts); err != nil {
		return err
	}
	own := update.DeviceMetaPrefix(d.id)
	if err := d.meta(ctx, own+"timestamp.json", &ts); err != nil {
		return err
	}
	var snap = ts
	if err := d.meta(ctx, fmt.Sprintf("%s%d.snapshot.json", own, ts.Signed.Meta["snapshot.json"].Version), &snap); err != nil {
		return err
	}
	var tg struct {
		Signed struct {
			Targets map[string]struct {
				Custom struct{ Devices []string } `json:"custom"`
			} `json:"targets"`
		} `json:"signed"`
	}
	if err := d.meta(ctx, fmt.Sprintf("%s%d.targets.json", own, snap.Signed.Meta["targets.json"].Version), &tg); err != nil {
		return err
	}
	want := ""
	for p, t := range tg.Signed.Targets {
		if v, ok := strings.CutPrefix(p, "m/"); ok && slices.Contains(t.Custom.Devices, d.id) && v > want {
			want = v
		}
	}
	if want == "" || want == d.active.Load().(string) {
		return nil
	}
	for _, c := range d.delta {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		n, err := d.chunk(rctx, c)
		cancel()
		if err != nil || n != c.Size {
			return fmt.Errorf("%s: chunk: %d bytes, %v", d.id, n, err)
		}
		d.chunkBytes.Add(c.Size)
	}
	d.active.Store(want)
	return d.publishState(ctx)
}

// chunk fetches c from the static host when there is one, over the
// request topics when not.
func (d *simDevice) chunk(ctx context.Context, c store.Chunk) (int64, error) {
	if d.bulk != nil {
		rc, err := d.bulk.FetchChunk(ctx, c.SHA256, c.Size)
		if err != nil {
			return 0, err
		}
		defer rc.Close()
		return io.Copy(io.Discard, io.LimitReader(rc, c.Size+1))
	}
	body, _ := json.Marshal(map[string]any{"sha256": c.SHA256, "size": c.Size})
	res, err := d.l.Request(ctx, wire.RequestName(update.TopicChunk), body)
	if err != nil || len(res) == 0 || res[0] != 0 {
		return 0, fmt.Errorf("%w (%.40q)", err, res)
	}
	return int64(len(res) - 1), nil
}

func (d *simDevice) meta(ctx context.Context, name string, v any) error {
	if d.bulk != nil {
		b, err := d.bulk.FetchMeta(ctx, name, 64<<20)
		if err != nil {
			return err
		}
		d.metaBytes.Add(int64(len(b)))
		return json.Unmarshal(b, v)
	}
	body, _ := json.Marshal(map[string]any{"name": name, "max": 64 << 20})
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	res, err := d.l.Request(rctx, wire.RequestName(update.TopicMeta), body)
	if err != nil {
		return err
	}
	if len(res) == 0 || res[0] != 0 {
		return fmt.Errorf("%s: %s: %q", d.id, name, res)
	}
	d.metaBytes.Add(int64(len(res) - 1))
	return json.Unmarshal(res[1:], v)
}

func deltaChunks(old, rel *update.Release) []store.Chunk {
	have := map[store.Digest]bool{}
	for _, f := range old.Files {
		for _, c := range f.Chunks {
			have[c.SHA256] = true
		}
	}
	var out []store.Chunk
	for _, f := range rel.Files {
		for _, c := range f.Chunks {
			if !have[c.SHA256] {
				have[c.SHA256] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// waitUntil waits until ok holds, checking it again each time changed's
// channel closes (the operator's View().Changed: a simulated device
// publishes its state after each change of its version).
func waitUntil(t *testing.T, what string, d time.Duration, changed func() <-chan struct{}, ok func() bool) {
	t.Helper()
	if !waitUntilOr(t, d, changed, ok) {
		t.Fatalf("timed out after %v waiting until %s", d, what)
	}
}

// waitUntilOr is waitUntil that reports a timeout instead of failing.
func waitUntilOr(t *testing.T, d time.Duration, changed func() <-chan struct{}, ok func() bool) bool {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		ch := changed() // before ok: a change after the check closes ch
		if ok() {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

// mosquittoPid finds the broker listening on port by its configuration.
func mosquittoPid(t *testing.T, port int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(cmd), "\x00")
		if len(args) < 3 || !strings.HasSuffix(args[0], "mosquitto") {
			continue
		}
		for i, a := range args {
			if a == "-c" && i+1 < len(args) {
				if conf, err := os.ReadFile(args[i+1]); err == nil && strings.Contains(string(conf), fmt.Sprintf("listener %d ", port)) {
					return pid
				}
			}
		}
	}
	t.Fatal("mosquitto's process not found")
	return 0
}

// procCPU is a process's user+system CPU seconds.
func procCPU(t *testing.T, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // USER_HZ
}

// procHWM is a process's peak resident memory in KiB.
func procHWM(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}

// procMem is a process's resident memory in KiB: all of it, its
// file-backed pages and its anonymous pages (/proc/PID/status).
type procMemory struct{ RSS, File, Anon int64 }

func procMem(t *testing.T, pid int) procMemory {
	m, ok := readProcMem(pid)
	if !ok {
		t.Fatalf("no memory figures in /proc/%d/status", pid)
	}
	return m
}

func readProcMem(pid int) (m procMemory, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, false
	}
	kib := func(v string) int64 { n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64); return n }
	var seen int
	for _, line := range strings.Split(string(b), "\n") {
		k, v, found := strings.Cut(line, ":")
		if !found {
			continue
		}
		switch k {
		case "VmRSS":
			m.RSS, seen = kib(v), seen+1
		case "RssFile":
			m.File, seen = kib(v), seen+1
		case "RssAnon":
			m.Anon, seen = kib(v), seen+1
		}
	}
	return m, seen == 3
}

// sysCounters4 reads mosquitto's $SYS message and byte counters.
func sysCounters4(t *testing.T, ctx context.Context, broker string) (recv, sent, brx, btx uint64) {
	t.Helper()
	c, err := link.Open(ctx, link.Config{Broker: broker, Fleet: "f", Device: "_test-sys4", CleanSession: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A new subscription first gets the retained value, up to one
	// publishing interval old: only the broker's next publication (not
	// retained) counts what happened before this call.
	var mu sync.Mutex
	got := map[string]uint64{}
	all := make(chan struct{})
	topics := []string{"$SYS/broker/messages/received", "$SYS/broker/messages/sent", "$SYS/broker/bytes/received", "$SYS/broker/bytes/sent"}
	for _, topic := range topics {
		if err := c.Subscribe(ctx, topic, 0, func(m link.Message) {
			if m.Retained {
				return
			}
			v, _ := strconv.ParseUint(string(m.Payload), 10, 64)
			mu.Lock()
			defer mu.Unlock()
			_, seen := got[m.Topic]
			got[m.Topic] = v
			if !seen && len(got) == len(topics) {
				close(all)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-time.After(90 * time.Second):
		t.Fatal("timed out after 1m30s waiting until $SYS counters")
	}
	mu.Lock()
	defer mu.Unlock()
	return got[topics[0]], got[topics[1]], got[topics[2]], got[topics[3]]
}
