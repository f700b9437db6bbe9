package loadgen

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/metrics"
)

// The tables below are shared by the Markdown and HTML reports: each is
// rows of cells, the first row the header.

func summaryRows(r *Report) [][]string {
	o := &r.Overall
	rows := [][]string{{"figure", "value"},
		{"requests", fmt.Sprintf("%d (%s)", o.Requests, outcomes(o.Outcomes))},
		{"TTFT p50 / p99 (ms)", fmtPtr(o.TTFTMs.P50, 1) + " / " + fmtPtr(o.TTFTMs.P99, 1)},
		{"TPOT p50 / p99 (ms)", fmtPtr(o.TPOTMs.P50, 2) + " / " + fmtPtr(o.TPOTMs.P99, 2)},
		{"ITL p99 (ms)", fmtPtr(o.ITLMs.P99, 2)},
		{"queue p99 (ms)", fmtPtr(o.QueueMs.P99, 1)},
		{"goodput (tok/s)", fmtPtr(o.GoodputTokS, 1)},
		{"throughput (tok/s)", fmtPtr(o.ThroughputTokS, 1)},
		{"SLO attainment", fmtPtr(o.SLOAttainment, 3)},
		{"max stable concurrency", maxStable(r)},
		{"power", powerLine(r)},
	}
	if o.Jitter != nil {
		rows = append(rows, []string{"jitter: TTFT p99 across windows (p99/p50)", fmtPtr(o.Jitter.TTFTP99.P99OverP50, 2)})
	}
	return rows
}

func outcomes(m map[metrics.Outcome]int) string {
	var parts []string
	for _, o := range metrics.Outcomes {
		if m[o] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[o], o))
		}
	}
	return strings.Join(parts, ", ")
}

func maxStable(r *Report) string {
	switch {
	case r.Sweep == nil:
		return "not swept"
	}
	return r.Sweep.MaxStableText()
}

func powerLine(r *Report) string {
	if r.Power.EnergyJ == nil {
		return "unavailable: " + powerWhy(&r.Power.Report)
	}
	s := fmt.Sprintf("%.2f J, %s W avg (%s, %s)", *r.Power.EnergyJ, fmtPtr(r.Power.AvgW, 2), r.Power.Source, r.Power.Scope)
	if r.Overall.OutputTokens > 0 {
		s += fmt.Sprintf(", %.4f J/token", *r.Power.EnergyJ/float64(r.Overall.OutputTokens))
	}
	return s
}

func verdictRows(r *Report, withReason bool) [][]string {
	rows := [][]string{{"threshold", "value", "samples", "verdict", "reason"}}
	for _, v := range r.Verdicts {
		rows = append(rows, []string{v.Threshold, fmtPtr(v.Value, 3), fmt.Sprintf("%d / %d", v.Samples, v.MinSamples), v.Status, "\x00" + v.Reason})
	}
	return rows
}

func phaseRows(r *Report) [][]string {
	rows := [][]string{{"phase", "load", "span (s)", "requests", "TTFT p50/p99", "TPOT p50/p99", "ITL p99", "queue p99", "E2E p99", "goodput tok/s", "SLO att."}}
	for _, p := range append(append([]PhaseReport{}, r.Phases...), r.Overall) {
		rows = append(rows, []string{p.Name, loadOf(p), fmt.Sprintf("%.1f–%.1f", p.StartS, p.EndS), fmt.Sprint(p.Requests),
			fmtPtr(p.TTFTMs.P50, 1) + " / " + fmtPtr(p.TTFTMs.P99, 1), fmtPtr(p.TPOTMs.P50, 2) + " / " + fmtPtr(p.TPOTMs.P99, 2),
			fmtPtr(p.ITLMs.P99, 2), fmtPtr(p.QueueMs.P99, 1), fmtPtr(p.E2EMs.P99, 1), fmtPtr(p.GoodputTokS, 1), fmtPtr(p.SLOAttainment, 3)})
	}
	return rows
}

func loadOf(p PhaseReport) string {
	a := p.Arrival
	switch a.Mode {
	case "closed":
		if a.ConcurrencyTo != 0 && a.ConcurrencyTo != a.Concurrency {
			return fmt.Sprintf("closed %d→%d", a.Concurrency, a.ConcurrencyTo)
		}
		return fmt.Sprintf("closed %d", a.Concurrency)
	case "poisson":
		if a.RateTo != 0 && a.RateTo != a.Rate {
			return fmt.Sprintf("poisson %g→%g/s", a.Rate, a.RateTo)
		}
		return fmt.Sprintf("poisson %g/s", a.Rate)
	case "burst":
		return fmt.Sprintf("%d every %s + %g/s", a.BurstSize, a.BurstEvery.D(), a.Rate)
	case "trace":
		return "trace " + a.Trace
	}
	return "—"
}

func powerRows(r *Report) [][]string {
	p := &r.Power.Report
	rows := [][]string{{"figure", "value"},
		{"energy_j", fmtPtr(p.EnergyJ, 3)}, {"net_energy_j", fmtPtr(p.NetEnergyJ, 3)}, {"avg_w", fmtPtr(p.AvgW, 2)},
		{"idle before / after (W)", fmtPtr(p.IdleWBefore, 2) + " / " + fmtPtr(p.IdleWAfter, 2)},
		{"source / scope", fmt.Sprintf("%s / %s (partial %v)", orNone(p.Source), orNone(string(p.Scope)), p.Partial)},
		{"samples / resolution", fmt.Sprintf("%d / %.0f ms", p.Samples, p.ResolutionMs)},
		{"throttle events", fmt.Sprint(p.ThrottleEvents)},
	}
	for _, u := range p.UnavailableReasons {
		rows = append(rows, []string{"unavailable: " + u.Source, "\x00" + u.Reason})
	}
	for _, n := range p.Notes {
		rows = append(rows, []string{"note", "\x00" + n})
	}
	for _, z := range p.Thermal {
		rows = append(rows, []string{"thermal " + z.Zone, fmtPtr(z.MinC, 1) + "–" + fmtPtr(z.MaxC, 1) + " °C"})
	}
	return rows
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func versionRows(r *Report) [][]string {
	v := &r.Versions
	opt := func(p *int) string {
		if p == nil {
			return "unknown"
		}
		if *p == 0 {
			return "0 (ONNX Runtime default)"
		}
		return fmt.Sprint(*p)
	}
	rows := [][]string{{"item", "value"},
		{"SDK", v.SDK}, {"commit", fmt.Sprintf("%s (%s, modified %v)", v.Commit, v.CommitSource, v.Modified)},
		{"Go", v.Go}, {"OS / arch", v.OS + " / " + v.Arch}, {"CPU", fmt.Sprintf("%s, %d cores", v.CPU, v.Cores)},
		{"CPU SIMD", orNone(strings.Join(v.SIMD, " "))}, {"transparent huge pages", v.HugePages},
		{"board", v.Board}, {"plugin runtime", v.PluginRuntime}, {"intra / inter-op threads", opt(v.IntraOpThreads) + " / " + opt(v.InterOpThreads)},
	}
	if pl := v.Platform; pl != nil {
		for _, c := range pl.Choices {
			if c.Setting != "board" {
				rows = append(rows, []string{"board profile: " + c.Setting, c.String()})
			}
		}
	}
	if v.KVBudgetBytes != nil {
		rows = append(rows, []string{"KV budget / prefix cache", fmt.Sprintf("%d B / %v", *v.KVBudgetBytes, *v.PrefixCache)})
	}
	if t := v.Target; t != nil {
		rows = append(rows, []string{"target server", fmt.Sprintf("%s, model %s (owned by %s), Server header %q", t.URL, t.Model, orNone(t.OwnedBy), t.Server)})
		for _, p := range slices.Sorted(maps.Keys(t.Reported)) {
			rows = append(rows, []string{"server reports " + p, "\x00" + truncate(t.Reported[p], 300)})
		}
		for _, u := range t.Unknown {
			rows = append(rows, []string{"unknown", u})
		}
		return rows
	}
	s := v.Sched
	rows = append(rows, []string{"batching", fmt.Sprintf("max batch %d, chunk %d, token budget %d, queue limit %d, preemption by priority %v",
		s.MaxBatch, s.ChunkSize, s.TokenBudget, s.QueueLimit, !s.NoPriorityPreemption)})
	for _, m := range v.Models {
		rows = append(rows, []string{"model", fmt.Sprintf("%s %s (%s, %s contract)", m.Name, m.Version, m.Kind, m.Contract)},
			[]string{"digest", "\x00" + m.Digest}, []string{"quantisation", orNone(m.Quantization)},
			[]string{"provider", "\x00" + providerLine(m.Provider, m.Attempts)}, []string{"ONNX Runtime", m.ORTVersion})
		if g := m.Geometry; g != nil {
			rows = append(rows, []string{"geometry", fmt.Sprintf("%d layers, %d heads, %d KV heads, head dim %d, vocab %d, max positions %d, block %d",
				g.Layers, g.Heads, g.KVHeads, g.HeadDim, g.Vocab, g.MaxPositions, g.BlockSize)})
		}
		if k := m.KV; k != nil {
			pages := "huge pages advised"
			if !k.HugePages {
				pages = "base pages"
			}
			rows = append(rows, []string{"KV cache", fmt.Sprintf("%d blocks × %d tokens, %d B/block, dtype %v, %s", k.Blocks, k.BlockSize, k.BytesPerToken*int64(k.BlockSize), k.DType, pages)})
		}
		rows = append(rows, []string{"weights in huge pages", fmt.Sprintf("%.1f MiB", float64(m.WeightHugePageBytes)/(1<<20))})
		if m.Attention != "" {
			rows = append(rows, []string{"attention", m.Attention})
		}
	}
	return rows
}

// providerLine names the chosen provider and, in order, why each provider
// tried before it was skipped.
func providerLine(p string, attempts []ProviderAttempt) string {
	var skipped []string
	for _, a := range attempts {
		if !a.Chosen {
			skipped = append(skipped, fmt.Sprintf("%s: %s", a.Provider, a.Reason))
		}
	}
	if len(skipped) == 0 {
		return p
	}
	return p + " (skipped " + strings.Join(skipped, "; ") + ")"
}

func jsonIndent(v any) (string, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	return string(b), err
}
