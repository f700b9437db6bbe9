package loadgen

import (
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// resourceReporter is an Engine that reports its own process's resources
// (a remote server, scraped); an in-process engine is this process.
type resourceReporter interface {
	Resources() Resources
}

// resources samples the engine's footprint: this process's for an
// in-process engine (the harness itself stays bounded, so growth here is
// the engine's), the server's own report for a remote one.
func (r *runner) resources(st engine.Stats) Resources {
	if rr, ok := r.e.(resourceReporter); ok {
		return rr.Resources()
	}
	res := Resources{Known: true, RSSBytes: selfRSS(), Goroutines: runtime.NumGoroutine()}
	res.GoHeapBytes, res.GoMappedBytes = goMemory()
	for _, kv := range st.KV {
		res.KVBlocksUsed += kv.BlocksUsed
	}
	return res
}

// goMemory reads the Go runtime's heap objects and what it holds from the
// OS, net of what it released (runtime/metrics: cheap, no stop-the-world).
func goMemory() (heap, mapped int64) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	for _, x := range s {
		if x.Value.Kind() != metrics.KindUint64 {
			return -1, -1
		}
	}
	return int64(s[0].Value.Uint64()), int64(s[1].Value.Uint64() - s[2].Value.Uint64())
}

// selfRSS reads this process's resident set from /proc/self/statm (0
// where unreadable).
func selfRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// ResourceReport is the engine's footprint over the run, per window, so
// that a leak shows: resident memory, goroutines and KV blocks in use,
// and the resident memory's trend.
type ResourceReport struct {
	// Known is false when the engine's resources cannot be read (Reason
	// says why); the other fields are then empty.
	Known   bool             `json:"known"`
	Reason  string           `json:"reason,omitempty"`
	Scope   string           `json:"scope"`
	Windows []ResourceWindow `json:"windows"`
	// RSSGrowthMiBPerHour is the least-squares slope of resident memory
	// over the second half of the run's samples: the first half holds the
	// first touches of KV pages (huge pages commit 2 MiB at a time) and of
	// caches, which are growth but not a leak. Over a short run it is
	// noise; a soak shows a leak as a steady positive slope.
	RSSGrowthMiBPerHour *float64 `json:"rss_growth_mib_per_hour"`
	// TrendSamples and TrendSpanS are what the trend stands on: the
	// samples fitted and the time they span. TrendWithheld says why the
	// trend is null when the samples were there but too short a span to
	// say anything per hour (minTrendSpan).
	TrendSamples  int     `json:"rss_trend_samples"`
	TrendSpanS    float64 `json:"rss_trend_span_s"`
	TrendWithheld string  `json:"rss_trend_withheld,omitempty"`
}

// minTrendSpan is the shortest span of samples an hourly RSS trend is
// given for: an hour is then at most 15 times what was seen. A minute of
// a run's first RSS growth (KV pages touched for the first time, caches
// filling) extrapolated to an hour is a number with no evidence behind it
// (TestRSSTrendWithheld checks that a short run's trend is withheld).
const minTrendSpan = 4 * time.Minute

// ResourceWindow is one window's maxima.
type ResourceWindow struct {
	StartS float64 `json:"start_s"`
	RSSMiB float64 `json:"rss_mib_max"`
	// GoHeapMiB and GoMappedMiB are the window's maxima of the Go heap's
	// objects and of what the Go runtime holds; null for a remote engine.
	// The resident memory outside Go is at least RSS − GoMapped.
	GoHeapMiB    *float64 `json:"go_heap_mib_max"`
	GoMappedMiB  *float64 `json:"go_mapped_mib_max"`
	Goroutines   int      `json:"goroutines_max"`
	KVBlocksUsed int      `json:"kv_blocks_used_max"`
}

// resourceReport folds the series into windows of w.
func resourceReport(res *Result, w float64, remote bool) *ResourceReport {
	rr := &ResourceReport{Scope: "this process: the in-process engine and the harness (whose own memory is bounded)"}
	if remote {
		rr.Scope = "the target server's process, from its /metrics"
	}
	var n, sx, sy, sxx, sxy float64
	var first, last float64 = -1, 0
	half := len(res.Series) / 2
	for k, p := range res.Series {
		if !p.Resources.Known {
			continue
		}
		rr.Known = true
		t := p.At.Sub(res.Start).Seconds()
		i := int(t / w)
		for len(rr.Windows) <= i {
			rr.Windows = append(rr.Windows, ResourceWindow{StartS: float64(len(rr.Windows)) * w})
		}
		win := &rr.Windows[i]
		mib := float64(p.Resources.RSSBytes) / (1 << 20)
		win.RSSMiB = max(win.RSSMiB, mib)
		if p.Resources.GoMappedBytes > 0 {
			h, m := float64(p.Resources.GoHeapBytes)/(1<<20), float64(p.Resources.GoMappedBytes)/(1<<20)
			if win.GoHeapMiB == nil {
				win.GoHeapMiB, win.GoMappedMiB = &h, &m
			}
			*win.GoHeapMiB, *win.GoMappedMiB = max(*win.GoHeapMiB, h), max(*win.GoMappedMiB, m)
		}
		win.Goroutines = max(win.Goroutines, p.Resources.Goroutines)
		win.KVBlocksUsed = max(win.KVBlocksUsed, p.Resources.KVBlocksUsed)
		if k >= half {
			n++
			sx, sy, sxx, sxy = sx+t, sy+mib, sxx+t*t, sxy+t*mib
			if first < 0 {
				first = t
			}
			last = t
		}
	}
	if !rr.Known {
		rr.Reason = "the engine's resident memory, goroutines and KV use were not readable"
		if remote {
			rr.Reason = "the target server does not expose process_resident_memory_bytes / go_goroutines on /metrics"
		}
		return rr
	}
	rr.TrendSamples = int(n)
	if n > 0 {
		rr.TrendSpanS = last - first
	}
	switch d := n*sxx - sx*sx; {
	case n < 3 || d <= 0:
		rr.TrendWithheld = fmt.Sprintf("%d samples in the second half: too few to fit", int(n))
	case rr.TrendSpanS < minTrendSpan.Seconds():
		rr.TrendWithheld = fmt.Sprintf("the second half spans %.0f s (%d samples); an hourly trend needs at least %v of them", rr.TrendSpanS, int(n), minTrendSpan)
	default:
		slope := (n*sxy - sx*sy) / d * 3600
		rr.RSSGrowthMiBPerHour = &slope
	}
	return rr
}

func resourceRows(r *Report) [][]string {
	rr := r.Resources
	if rr == nil || !rr.Known {
		reason := "not measured"
		if rr != nil {
			reason = rr.Reason
		}
		return [][]string{{"resources", "value"}, {"unknown", reason}}
	}
	rows := [][]string{{"window start s", "RSS MiB (max)", "Go heap MiB (max)", "Go runtime MiB (max)", "goroutines (max)", "KV blocks used (max)"}}
	for _, w := range rr.Windows {
		rows = append(rows, []string{fmt.Sprintf("%.0f", w.StartS), fmt.Sprintf("%.1f", w.RSSMiB), fmtPtr(w.GoHeapMiB, 1), fmtPtr(w.GoMappedMiB, 1),
			fmt.Sprint(w.Goroutines), fmt.Sprint(w.KVBlocksUsed)})
	}
	rows = append(rows, []string{"RSS trend (second half)", rr.TrendText(), "", "", "", rr.Scope})
	return rows
}

// TrendText is the RSS trend with what it stands on, or why it is withheld.
func (rr *ResourceReport) TrendText() string {
	if rr.RSSGrowthMiBPerHour == nil {
		if rr.TrendWithheld != "" {
			return "withheld: " + rr.TrendWithheld
		}
		return "n/a"
	}
	return fmt.Sprintf("%+.1f MiB/h (least squares over %d samples in %.0f s)", *rr.RSSGrowthMiBPerHour, rr.TrendSamples, rr.TrendSpanS)
}
