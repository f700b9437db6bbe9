package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/store"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

// residentKV is the decoders' KV budget in these tests, committed at load
// (Prefault), so that what the budget counts is resident at once.
var residentKV = KVOptions{BudgetBytes: 64 << 20, Prefault: true}

// threeModels are three real decoders (examples/tinylm as it is and with
// a chat template, and tiny-test) and their footprints as their manifests
// estimate them (what the engine counts at the least).
func threeModels(t *testing.T) (specs []ModelSpec, names []string, estimates []int64) {
	t.Helper()
	orttest.Need(t)
	dirs, err := tinyText()
	if err != nil {
		t.Fatal(err)
	}
	fp := &Engine{cfg: Config{KV: residentKV}}
	for _, dir := range []string{tinyBundle(t), dirs[0], dirs[1]} {
		b, err := bundle.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, ModelSpec{Dir: dir})
		names = append(names, b.Manifest.Name)
		estimates = append(estimates, fp.footprint(&b.Manifest))
	}
	return specs, names, estimates
}

// twoOfThree is a budget any two of the models fit in, and not all three:
// the engine counts each at least at its estimate, and a few MiB over it
// when it measures more.
func twoOfThree(bytes []int64) int64 {
	var total, least int64 = 0, bytes[0]
	for _, b := range bytes {
		total += b
		least = min(least, b)
	}
	return total - least/2
}

// rssPeak samples the process's resident set every millisecond until
// stop is called, which returns the highest sample.
func rssPeak() (stop func() int64) {
	done := make(chan struct{})
	peak := make(chan int64)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		hi := selfRSS()
		for {
			select {
			case <-tick.C:
				hi = max(hi, selfRSS())
			case <-done:
				peak <- max(hi, selfRSS())
				return
			}
		}
	}()
	return func() int64 { close(done); return <-peak }
}

// TestBudgetRSS: three models under a memory budget that fits two, a
// mixed workload (the three in turn, then
// three clients at once on random models): every request is answered,
// the first request on each version loaded on demand reports its load
// time, idle models are unloaded to make room, and the process's resident
// set stays under its baseline plus the budget plus 5 %. The baseline is
// the process with no model loaded: the Go runtime and the test's data,
// ONNX Runtime's environment (the library, held by an engine under a
// budget) and what its first sessions leave behind process-wide (each
// model loaded, run with three requests at once and closed before: the
// per-thread scratch of its kernels stays, sized by the largest step
// run); the three are logged apart.
func TestBudgetRSS(t *testing.T) {
	specs, names, bytes := threeModels(t)
	budget := twoOfThree(bytes)
	settled := func() int64 { runtime.GC(); debug.FreeOSMemory(); return selfRSS() }
	cold := settled()
	base, err := Open(context.Background(), Config{Session: sessionOpts(), MemoryBudgetBytes: 1}) // holds the environment
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close(context.Background())
	env := settled()
	for i := range specs {
		w, err := Open(context.Background(), Config{Models: specs[i : i+1], KV: residentKV, Session: sessionOpts()})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for c := range 3 { // batched steps, as the workload's: ONNX Runtime's per-thread scratch grows to their size
			wg.Go(func() {
				w.GenerateTokens(context.Background(), names[i], ids(12, c), GenerateOptions{MaxTokens: 6}).Summary()
			})
		}
		wg.Wait()
		if err := w.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	baseline := settled()
	t.Logf("baseline RSS: Go and the test %s, + ONNX Runtime's environment %s, + its first sessions' leftovers %s = %s",
		mib(cold), mib(env-cold), mib(baseline-env), mib(baseline))
	stop := rssPeak()

	snk := &sink{}
	e, err := Open(context.Background(), Config{Models: specs, KV: residentKV, Session: sessionOpts(),
		MemoryBudgetBytes: budget, Observers: []Observer{snk}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if got := len(e.Models()); got != 2 {
		t.Fatalf("%d models loaded at start, want the 2 that fit", got)
	}
	var mu sync.Mutex
	var loads []time.Duration
	ask := func(name string, i int) {
		s := e.GenerateTokens(context.Background(), name, ids(12, i), GenerateOptions{MaxTokens: 6})
		n := 0
		for _, err := range s.Tokens() {
			if err != nil {
				t.Errorf("%s request %d: %v", name, i, err)
				return
			}
			n++
		}
		if sum := s.Summary(); sum.LoadTime > 0 {
			mu.Lock()
			loads = append(loads, sum.LoadTime)
			mu.Unlock()
		}
	}
	requests := 0
	for i := range 9 { // in turn: every request but the first two needs a load
		ask(names[i%3], i)
		requests++
	}
	rng := rand.New(rand.NewPCG(33, 1))
	picks := make([][]string, 3)
	for c := range picks {
		for range 6 {
			picks[c] = append(picks[c], names[rng.IntN(3)])
		}
	}
	var wg sync.WaitGroup
	for c := range picks {
		wg.Go(func() {
			for i, name := range picks[c] {
				ask(name, 100*c+i)
			}
		})
		requests += len(picks[c])
	}
	wg.Wait()
	peak := stop()
	st := e.Stats().Residency
	recs := snk.take(t, requests)
	withLoad := 0
	for _, r := range recs {
		if r.LoadTime > 0 {
			withLoad++
		}
	}
	onDemand := int(st.Loads) - 2 // the two loaded by Open report none
	av, err := e.Available(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var counted []int64
	for _, a := range av {
		counted = append(counted, a.Bytes)
	}
	t.Logf("footprints counted after the run (max of the estimate and the measures; %v): %s", names, strings.Join(mibs(counted), ", "))
	t.Logf("budget %s for %v of %s; baseline RSS %s, peak %s (peak − baseline %s, %.0f%% of the budget); %d requests, %d loads on demand (mean %v), %d unloaded for room",
		mib(budget), names, strings.Join(mibs(bytes), ", "), mib(baseline), mib(peak), mib(peak-baseline),
		100*float64(peak-baseline)/float64(budget), requests, onDemand, mean(loads), st.Evictions)
	if len(loads) != onDemand || withLoad != onDemand || onDemand < 7 {
		t.Errorf("%d loads on demand, %d summaries and %d records with a load time: every one's first request reports it", onDemand, len(loads), withLoad)
	}
	if st.Evictions == 0 || st.UsedBytes > budget {
		t.Errorf("residency %+v", st)
	}
	if limit := baseline + budget + budget/20; peak > limit {
		t.Errorf("peak RSS %s over baseline + budget + 5%% = %s", mib(peak), mib(limit))
	}
}

func mibs(b []int64) []string {
	var out []string
	for _, x := range b {
		out = append(out, mib(x))
	}
	return out
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(len(ds))
}

func sessionOpts() ort.Options { return ort.Options{IntraOpThreads: 1} }

// storeWith imports the bundles into a new store and returns its path.
func storeWith(t *testing.T, dirs ...string) string {
	t.Helper()
	path := t.TempDir() + "/models.db"
	st, err := store.Open(context.Background(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, d := range dirs {
		if _, err := st.Import(context.Background(), d, nil); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// Concurrent requests for a model of the store that is not loaded load it
// once; the one that ran the load reports its time.
func TestDemandLoadsOnce(t *testing.T) {
	orttest.Need(t)
	path := storeWith(t, tinyBundle(t))
	e, err := Open(context.Background(), Config{Store: path, Session: sessionOpts(), KV: residentKV})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if len(e.Models()) != 0 {
		t.Fatal("a store model loaded before any request")
	}
	sums := make([]Summary, 6)
	var wg sync.WaitGroup
	for i := range sums {
		wg.Go(func() {
			sums[i] = e.GenerateTokens(context.Background(), "tiny-test", ids(8, i), GenerateOptions{MaxTokens: 3}).Summary()
		})
	}
	wg.Wait()
	reported := 0
	for _, s := range sums {
		if s.Err != nil || s.OutputTokens != 3 {
			t.Fatalf("summary %+v", s)
		}
		if s.LoadTime > 0 {
			reported++
		}
	}
	if st := e.Stats().Residency; st.Loads != 1 || reported != 1 {
		t.Fatalf("%d loads, %d requests reporting one: want 1 and 1", st.Loads, reported)
	}
	av, err := e.Available(context.Background())
	if err != nil || len(av) != 1 || !av[0].Loaded || av[0].Bytes == 0 {
		t.Fatalf("available %+v, %v", av, err)
	}
	for _, err := range e.GenerateTokens(context.Background(), "absent", ids(4, 0), GenerateOptions{}).Tokens() {
		if !errors.Is(err, ErrUnknownModel) {
			t.Fatalf("a model in no store: %v", err)
		}
	}
}

// TestLoadWaitGivesUp: under a budget loads run one at a time; a request
// waiting for its turn ends with its context instead of waiting for the
// load ahead of it, and the model loads for the next request.
func TestLoadWaitGivesUp(t *testing.T) {
	orttest.Need(t)
	path := storeWith(t, tinyBundle(t))
	e, err := Open(context.Background(), Config{Store: path, Session: sessionOpts(), KV: residentKV, MemoryBudgetBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	e.res.loadSem <- struct{}{} // another load is under way
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	s := e.GenerateTokens(ctx, "tiny-test", ids(8, 0), GenerateOptions{MaxTokens: 2}).Summary()
	if !errors.Is(s.Err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("waiting for another load: %v after %v, want its deadline", s.Err, time.Since(start))
	}
	<-e.res.loadSem
	if s := e.GenerateTokens(context.Background(), "tiny-test", ids(8, 0), GenerateOptions{MaxTokens: 2}).Summary(); s.Err != nil || s.LoadTime == 0 {
		t.Fatalf("after the other load: %+v", s)
	}
}

// A model bigger than the budget is refused with a *BudgetError naming
// it, its size and the budget, not loaded.
func TestBudgetRefusesTooBig(t *testing.T) {
	orttest.Need(t)
	path := storeWith(t, tinyBundle(t))
	const budget = 1 << 20 // under the KV budget alone
	e, err := Open(context.Background(), Config{Store: path, Session: sessionOpts(), KV: residentKV, MemoryBudgetBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	s := e.GenerateTokens(context.Background(), "tiny-test", ids(8, 0), GenerateOptions{MaxTokens: 2}).Summary()
	be, ok := errors.AsType[*BudgetError](s.Err)
	if !ok || !errors.Is(s.Err, ErrOverBudget) || be.Model != "tiny-test" || be.Budget != budget || be.Bytes <= budget {
		t.Fatalf("err %v", s.Err)
	}
	if msg := s.Err.Error(); !strings.Contains(msg, "tiny-test") || !strings.Contains(msg, "1.0 MiB") {
		t.Fatalf("message %q names neither the model nor the budget", msg)
	}
	if st := e.Stats().Residency; st.Loads != 0 || st.UsedBytes != 0 {
		t.Fatalf("residency after the refusal %+v", st)
	}
}

// The keep-alive, in a synctest bubble's time: a model stays loaded for
// its keep-alive after its last request and is unloaded then; 0 unloads
// it once idle; a negative one keeps it.
func TestKeepAlive(t *testing.T) {
	orttest.Need(t)
	path := storeWith(t, tinyBundle(t))
	synctest.Test(t, func(t *testing.T) {
		e, err := Open(context.Background(), Config{Store: path, Session: sessionOpts(), KV: residentKV, KeepAlive: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(context.Background())
		loaded := func() bool { return len(e.Models()) == 1 }
		ask := func(keep *time.Duration) {
			t.Helper()
			if s := e.GenerateTokens(context.Background(), "tiny-test", ids(8, 0), GenerateOptions{MaxTokens: 2, KeepAlive: keep}).Summary(); s.Err != nil {
				t.Fatal(s.Err)
			}
			synctest.Wait()
		}
		ask(nil) // the engine's minute
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if !loaded() {
			t.Fatal("unloaded before its keep-alive")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if loaded() {
			t.Fatal("still loaded after its keep-alive")
		}
		thirty, zero, always := 30*time.Second, time.Duration(0), time.Duration(-1)
		ask(&thirty)
		time.Sleep(31 * time.Second)
		synctest.Wait()
		if loaded() {
			t.Fatal("a request's keep-alive of 30s: still loaded after 31s")
		}
		ask(&zero)
		if loaded() {
			t.Fatal("keep-alive 0: still loaded once idle")
		}
		ask(&always)
		time.Sleep(24 * time.Hour)
		synctest.Wait()
		if !loaded() {
			t.Fatal("a negative keep-alive: unloaded")
		}
		if st := e.Stats().Residency; st.Expiries != 3 || st.Loads != 4 {
			t.Fatalf("residency %+v, want 3 expiries of 4 loads", st)
		}
	})
}

// idleLocked, on fake versions: the idle ones that can be unloaded, least
// recently used first, as many as cover the excess; none when all of them
// would not.
func TestIdleLockedLRU(t *testing.T) {
	t0 := time.Unix(1000, 0)
	fake := func(bytes int64, ago time.Duration, live int, pinned bool) *model {
		m := &model{res: residency{bytes: bytes, pinned: pinned}}
		m.mu.lastUsed, m.mu.live = t0.Add(-ago), live
		return m
	}
	e := &Engine{}
	e.mu.models = map[string]*model{
		"old":        fake(10, 3*time.Hour, 0, false),
		"older-busy": fake(10, 4*time.Hour, 1, false),
		"pinned":     fake(10, 5*time.Hour, 0, true),
		"mid":        fake(20, 2*time.Hour, 0, false),
		"new":        fake(30, time.Hour, 0, false),
		"x@staged":   fake(10, 6*time.Hour, 0, false),
		"spared":     fake(10, 7*time.Hour, 0, false),
	}
	for _, c := range []struct {
		excess int64
		want   string
	}{{1, "old"}, {10, "old"}, {11, "old mid"}, {31, "old mid new"}, {60, "old mid new"}, {61, ""}} {
		var got []string
		for _, v := range e.idleLocked(c.excess, "spared") {
			got = append(got, v.name)
		}
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("excess %d: unload %q, want %q", c.excess, s, c.want)
		}
	}
}

// TestLoadOverItsReservationMakesRoom: a load that measures more than it
// reserved (its first one, counted at the manifest's estimate) unloads
// idle models until the budget holds again, rather than leaving the
// engine over it until the next load.
func TestLoadOverItsReservationMakesRoom(t *testing.T) {
	specs, names, bytes := threeModels(t)
	budget := twoOfThree(bytes)
	e, err := Open(context.Background(), Config{Models: specs, KV: residentKV, Session: sessionOpts(), MemoryBudgetBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	// The third model measures a quarter of the smallest estimate under
	// the budget (a load's real growth can pass its estimate by a few
	// MiB; the smallest estimate is tens): the two loaded at Open must
	// both go, one to reserve its estimate and one once it measured.
	least := slices.Min(bytes)
	e.res.skew = func(name string) int64 {
		if name == names[2] {
			return budget - bytes[2] - least/4
		}
		return 0
	}
	if s := e.GenerateTokens(context.Background(), names[2], ids(8, 0), GenerateOptions{MaxTokens: 2}).Summary(); s.Err != nil {
		t.Fatal(s.Err)
	}
	st := e.Stats().Residency
	if st.UsedBytes > budget || st.Evictions != 2 || len(e.Models()) != 1 {
		t.Fatalf("after a load measured at %s under a budget of %s: %d loaded, %+v", mib(budget-least/4), mib(budget), len(e.Models()), st)
	}
}
