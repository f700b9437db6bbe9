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
// max_inflight_messages 0 (SERVING.md: mosquitto's default window of 20
// stalled the serve connection at 10,000 devices); EDGEINFER_FLEET_SIM_BROKER
// replaces that line.
//
//	EDGEINFER_FLEET_SIM=10000 go test -run TestScaleSim -v ./update/fleet/
func TestScaleSim(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("EDGEINFER_FLEET_SIM"))
	if n <= 0 || testing.Short() {
		t.Skip("a measurement: set EDGEINFER_FLEET_SIM=<devices>")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := mosquittotest.Start(t, mosquittotest.Options{Extra: "sys_interval 1\nmax_queued_messages 100000\n" + cmp.Or(os.Getenv("EDGEINFER_FLEET_SIM_BROKER"), "max_inflight_messages 0\n")})
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

	// fleet serve as its own process.
	bin := filepath.Join(t.TempDir(), "edgeinfer")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/edgeinfer/edgeinfer/runtime/cmd/edgeinfer").CombinedOutput(); err != nil {
		t.Fatalf("build the CLI: %v\n%s", err, out)
	}
	serve := exec.Command(bin, "fleet", "serve", "--broker", b.URL(), "--fleet", "f", "--repo", repoDir, "--keys", keys, "--instance", "a", "--stats-every", "1s")
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
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if i := strings.IndexByte(sc.Text(), '{'); i >= 0 {
				var st fleet.ServeStats
				if json.Unmarshal([]byte(sc.Text()[i:]), &st) == nil {
					lastStats.Store(st)
				}
			}
		}
	}()
	brokerPid := mosquittoPid(t, b.Port)

	// Bulk data (metadata and chunks) from nginx over HTTPS, the fleet's
	// default; EDGEINFER_FLEET_SIM_BULK=mqtt fetches it over the request
	// topics as a small fleet without a static host does. The devices
	// share one HTTP client (its connections): a TLS handshake per device
	// would measure this machine's CPU, not the protocol.
	var bulk update.Source
	via := "nginx over HTTPS"
	if os.Getenv("EDGEINFER_FLEET_SIM_BULK") == "mqtt" {
		via = "the broker's request topics"
	} else {
		ng := updatetest.StartNginx(t, repoDir)
		tr := ng.Client.Transport.(*http.Transport).Clone()
		// The test's nginx takes 256 connections (one worker); a CDN
		// takes the fleet's.
		tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = 128, 128
		bulk = update.HTTPSource{BaseURL: ng.URL, Client: &http.Client{Transport: tr}}
	}
	t.Logf("metadata and chunks from %s", via)

	// The devices, connected 100 at a time.
	start := time.Now()
	devs := make([]*simDevice, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 100)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d, err := startSimDevice(ctx, b.URL(), fmt.Sprintf("sim-%05d", i), delta, bulk)
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
	defer func() {
		var wg sync.WaitGroup
		for _, d := range devs {
			wg.Add(1)
			go func() { defer wg.Done(); d.l.Close() }()
		}
		wg.Wait()
	}()
	connected := time.Since(start)

	// Status ingestion: an operator's client reads every retained record.
	start = time.Now()
	op, err := fleet.Dial(ctx, fleet.ClientConfig{Broker: b.URL(), Fleet: "f"})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	waitUntil(t, "the operator's view holds every device", 5*time.Minute, op.View().Changed, func() bool {
		k := 0
		for _, d := range op.View().Devices() {
			if d.Update != nil && d.Status != nil {
				k++
			}
		}
		return k == n
	})
	ingest := time.Since(start)

	recv0, sent0, brx0, btx0 := sysCounters4(t, ctx, b.URL())
	cpu0, cpuB0 := procCPU(t, serve.Process.Pid), procCPU(t, brokerPid)
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
			var up, retries int64
			for _, d := range devs {
				if d.active.Load().(string) == "2" {
					up++
				}
				retries += d.retries.Load()
			}
			if ro != nil {
				t.Logf("%v: wave %d assigned %d, %d devices on 2, %d retries; serve %d meta %d chunk requests, %d response bytes",
					time.Since(start).Round(time.Second), ro.Wave+1, ro.Assigned, up, retries, st.MetaRequests, st.ChunkRequests, st.ResponseBytes)
			}
		}
	}()
	waitUntil(t, "the rollout completes", 30*time.Minute, op.View().Changed, func() bool {
		ro := op.View().Rollout("r2")
		return ro != nil && ro.Done()
	})
	waitUntil(t, "every device runs 2", 10*time.Minute, op.View().Changed, func() bool {
		for _, d := range devs {
			if d.active.Load().(string) != "2" {
				return false
			}
		}
		return true
	})
	took := time.Since(start)
	cpu1, cpuB1 := procCPU(t, serve.Process.Pid), procCPU(t, brokerPid)
	recv1, sent1, brx1, btx1 := sysCounters4(t, ctx, b.URL())
	ro := op.View().Rollout("r2")
	if ro.State != fleet.RolloutCompleted {
		t.Fatalf("rollout %s: %s", ro.State, ro.Reason)
	}
	st, _ := lastStats.Load().(fleet.ServeStats)
	var deltaBytes, fetched, metaBytes, retries int64
	for _, c := range delta {
		deltaBytes += c.Size
	}
	for _, d := range devs {
		fetched += d.chunkBytes.Load()
		metaBytes += d.metaBytes.Load()
		retries += d.retries.Load()
	}
	dirSize := fileSize(repoDir, "director")
	t.Logf("devices %d: connected in %v; operator view of %d retained records in %v (%.0f records/s)", n, connected.Round(time.Millisecond),
		2*n, ingest.Round(time.Millisecond), float64(2*n)/ingest.Seconds())
	t.Logf("rollout 1,10,50,100 %% of a %d-byte delta (one 256 KiB layer of 2.5 MiB): %v wall; last decision pass %v; %d director writes, director targets %d bytes",
		deltaBytes, took.Round(time.Millisecond), st.DecisionTime, st.DirectorWrites, dirSize)
	t.Logf("device retries after a failed or timed-out check: %d", retries)
	for _, d := range devs {
		if e, ok := d.lastErr.Load().(string); ok {
			t.Logf("a failed check (%s): %s", d.id, e)
			break
		}
	}
	t.Logf("per device update: broker messages (MQTT packets of any type, acknowledgements included) %.1f received, %.1f sent; broker bytes %.0f received, %.0f sent; chunk bytes %.0f, metadata bytes %.0f",
		float64(recv1-recv0)/float64(n), float64(sent1-sent0)/float64(n), float64(brx1-brx0)/float64(n), float64(btx1-btx0)/float64(n),
		float64(fetched)/float64(n), float64(metaBytes)/float64(n))
	t.Logf("fleet serve: CPU %.1f s over %.1f s (%.0f %% of a core), peak RSS %d MiB; mosquitto: CPU %.1f s (%.0f %% of a core), peak RSS %d MiB; messages at the broker %.0f/s",
		cpu1-cpu0, took.Seconds(), 100*(cpu1-cpu0)/took.Seconds(), procHWM(t, serve.Process.Pid)>>10,
		cpuB1-cpuB0, 100*(cpuB1-cpuB0)/took.Seconds(), procHWM(t, brokerPid)>>10, float64(recv1-recv0+sent1-sent0)/took.Seconds())
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
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		ch := changed() // before ok: a change after the check closes ch
		if ok() {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting until %s", d, what)
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

func fileSize(repoDir, repo string) int64 {
	ents, _ := os.ReadDir(filepath.Join(repoDir, repo))
	var best string
	var bestN int
	for _, e := range ents {
		if v, ok := strings.CutSuffix(e.Name(), ".targets.json"); ok {
			if n, _ := strconv.Atoi(v); n > bestN {
				best, bestN = e.Name(), n
			}
		}
	}
	fi, err := os.Stat(filepath.Join(repoDir, repo, best))
	if err != nil {
		return 0
	}
	return fi.Size()
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
