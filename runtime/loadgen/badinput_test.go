package loadgen

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/power/powertest"
)

// TestUnreachableSLOBlocks: a TTFT limit below what one request alone
// achieves is judged block with the reason, not retest or a plain miss.
// The p99.9 threshold must see too few samples: two output tokens (one
// TPOT sample a request) over a 50 ms phase keep them far below 1,000 on
// a fast machine too (200 ms of four-token requests gave 1,188–1,290 on a
// quiet Zen 5, and the test failed there).
func TestUnreachableSLOBlocks(t *testing.T) {
	e, cfg := openTiny(t)
	spec, err := ParseSpec([]byte(`
name: impossible
input: {kind: fixed, value: 16}
output: {kind: fixed, value: 2}
warmup: 150ms
thresholds:
  - {metric: ttft_ms.p50, max: 0.000001}
  - {metric: tpot_ms.p999, max: 10000}
phases:
  - {name: a, kind: baseline, duration: 50ms, arrival: {mode: closed, concurrency: 1}}
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), e, spec, Options{EngineConfig: cfg, PowerFS: powertest.NewFS(map[string]string{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Close() })
	rep := BuildReport(res)
	v := rep.Verdicts[0]
	if v.Status != Block || !strings.Contains(v.Reason, "no load can meet") {
		t.Fatalf("verdict %+v", v)
	}
	if rep.Verdicts[1].Status != Retest || !strings.Contains(rep.Verdicts[1].Reason, "too few samples") {
		t.Fatalf("p99.9 over a few hundred requests: %+v", rep.Verdicts[1])
	}
	if rep.Status != Block {
		t.Fatalf("status %s", rep.Status)
	}
}

// TestPowerSensorVanishesAndGoesBackwards runs against a RAPL counter whose
// file disappears mid-run and whose value then jumps backwards (a driver
// reload): the run completes, the report keeps the sampler's gap notes, and
// energy is never invented across the gaps.
func TestPowerSensorVanishesAndGoesBackwards(t *testing.T) {
	e, cfg := openTiny(t)
	const ctr = "sys/class/powercap/intel-rapl:0/energy_uj"
	m := powertest.NewFS(map[string]string{
		"sys/class/powercap/intel-rapl:0/name": "package-0",
		ctr:                                    "1000000",
		"sys/class/powercap/intel-rapl:0/max_energy_range_uj": "262143328850",
	})
	spec, err := ParseSpec([]byte(`
name: sensors
input: {kind: fixed, value: 8}
output: {kind: fixed, value: 8}
thresholds: [{metric: energy_j_per_token, max: 100}]
phases:
  - {name: a, kind: baseline, duration: 900ms, arrival: {mode: closed, concurrency: 2}}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		raw := uint64(1000000)
		for i := 0; ctx.Err() == nil; i++ {
			time.Sleep(20 * time.Millisecond) // on purpose: a fake 10 W counter advancing in real time
			switch {
			case i == 15:
				m.Remove(ctr) // the file vanishes for a while
			case i > 15 && i < 25:
			case i == 30:
				raw = 500 // driver reload: the counter restarts
				m.Set(ctr, strconv.FormatUint(raw, 10))
			default:
				raw += 200000 // 10 W
				m.Set(ctr, strconv.FormatUint(raw, 10))
			}
		}
	})
	res, err := Run(context.Background(), e, spec, Options{EngineConfig: cfg, PowerFS: m, PowerPeriod: 20 * time.Millisecond})
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Close() })
	rep := BuildReport(res)
	if len(rep.Power.Sources) != 1 {
		t.Fatalf("sources %+v unavailable %+v", rep.Power.Sources, rep.Power.UnavailableReasons)
	}
	if g := rep.Power.Sources[0].Gaps; g < 1 {
		t.Fatalf("gaps %d, want the vanished file and the reset counted", g)
	}
	if e := rep.Power.EnergyJ; e != nil && *e > 10*rep.WallS+1 {
		t.Fatalf("energy %.3f J over %.2f s at 10 W: invented across a gap", *e, rep.WallS)
	}
	if v := rep.Verdicts[0]; v.Status != Retest || !strings.Contains(v.Reason, "evidence incomplete") {
		t.Fatalf("energy per token over a gappy sensor: %+v, want retest (evidence incomplete)", v)
	}
	var md strings.Builder
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, n := range rep.Power.Notes {
		if !strings.Contains(md.String(), n) {
			t.Errorf("report.md lacks the power note %q", n)
		}
	}
	t.Logf("power: energy %s J, gaps %d, notes %q, verdict %+v", fmtPtr(rep.Power.EnergyJ, 3), rep.Power.Sources[0].Gaps, rep.Power.Notes, rep.Verdicts[0])
}
