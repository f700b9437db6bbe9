package loadgen

import (
	"fmt"
	"html"
	"io"
	"slices"
	"strings"
)

// WriteHTML writes report.html: one self-contained page (inline CSS and
// SVG, no script, no external resource) with the summary, verdicts, the
// latency CDFs, the throughput–latency curve, the run's timeline with
// phase bands, power and the version matrix.
func (r *Report) WriteHTML(w io.Writer) error {
	var b strings.Builder
	e := html.EscapeString
	fmt.Fprintf(&b, `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>edgeinfer bench: %s</title><style>
body{font-family:sans-serif;max-width:1100px;margin:24px auto;padding:0 12px;color:#222}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}.pass{color:#fff;background:#1a7f37}.retest{color:#000;background:#f2c94c}
.block{color:#fff;background:#c62828}.badge{padding:2px 8px;border-radius:4px;font-weight:bold}svg{display:block;margin:8px 0}
code{background:#f4f4f4;padding:0 3px}</style></head><body>
`, e(r.Name))
	fmt.Fprintf(&b, "<h1>edgeinfer bench: %s <span class=\"badge %s\">%s</span></h1>\n", e(r.Name), r.Status, strings.ToUpper(r.Status))
	fmt.Fprintf(&b, "<p>Model <code>%s</code> · started %s · %.1f s · schema <code>%s</code> · prompts: %s</p>\n",
		e(r.Model), r.Started.Format("2006-01-02 15:04:05 MST"), r.WallS, Schema, e(r.Workload.Prompts))

	b.WriteString("<h2>Summary</h2>\n")
	writeHTMLTable(&b, summaryRows(r))
	b.WriteString("<h2>Verdicts</h2>\n")
	writeHTMLTable(&b, verdictRows(r, true))
	b.WriteString("<h2>Phases</h2>\n")
	writeHTMLTable(&b, phaseRows(r))
	b.WriteString("<h2>Resources per window</h2>\n")
	writeHTMLTable(&b, resourceRows(r))

	b.WriteString("<h2>Latency CDFs</h2>\n")
	b.WriteString(cdfChart(r, "TTFT", func(p RequestPoint) *float64 { return p.TTFTMs }))
	b.WriteString(cdfChart(r, "TPOT", func(p RequestPoint) *float64 { return p.TPOTMs }))
	b.WriteString("<h2>Throughput–latency curve (sweep)</h2>\n")
	b.WriteString(curveChart(r))
	b.WriteString("<h2>Timeline</h2>\n")
	for _, c := range timelineCharts(r) {
		b.WriteString(c)
	}

	b.WriteString("<h2>Power</h2>\n")
	writeHTMLTable(&b, powerRows(r))
	b.WriteString("<h2>Version matrix</h2>\n")
	writeHTMLTable(&b, versionRows(r))
	if len(r.Notes) > 0 {
		b.WriteString("<h2>Notes</h2><ul>")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "<li>%s</li>", e(n))
		}
		b.WriteString("</ul>\n")
	}
	spec, _ := jsonIndent(r.Spec)
	fmt.Fprintf(&b, "<details><summary>Workload spec</summary><pre>%s</pre></details>\n</body></html>\n", e(spec))
	_, err := io.WriteString(w, b.String())
	return err
}

// writeHTMLTable writes rows (the first is the header); figures are
// right-aligned so their digits line up, text (the first column, a cell
// marked with a leading NUL, anything not starting with a figure) is
// left-aligned, and a cell equal to a verdict status is coloured.
func writeHTMLTable(b *strings.Builder, rows [][]string) {
	b.WriteString("<table>")
	// A header sits over its column: left over text, right over figures.
	textCol := map[int]bool{}
	if len(rows) > 1 {
		for j, cell := range rows[1] {
			textCol[j] = strings.HasPrefix(cell, "\x00") || !figure(cell)
		}
	}
	for i, row := range rows {
		b.WriteString("<tr>")
		for j, cell := range row {
			tag, class := "td", ""
			if i == 0 {
				tag = "th"
			}
			if j == 0 || strings.HasPrefix(cell, "\x00") || (i > 0 && !figure(cell)) || (i == 0 && textCol[j]) {
				class = ` class="l"`
			}
			cell = strings.TrimPrefix(cell, "\x00")
			if i > 0 && (cell == Pass || cell == Retest || cell == Block) {
				class = ` class="` + cell + `"`
			}
			fmt.Fprintf(b, "<%s%s>%s</%s>", tag, class, html.EscapeString(cell), tag)
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</table>\n")
}

// figure reports whether a cell reads as a number ("12.5", "-3", "2 / 4",
// "n/a / 1.0") rather than text.
func figure(cell string) bool {
	cell = strings.TrimPrefix(cell, "n/a")
	cell = strings.TrimLeft(cell, " /+-")
	return cell == "" || (cell[0] >= '0' && cell[0] <= '9')
}

func cdfChart(r *Report, name string, get func(RequestPoint) *float64) string {
	series := make([][]float64, len(r.Phases))
	var all []float64
	for _, p := range r.Requests {
		if v := get(p); v != nil && p.Phase < len(series) {
			series[p.Phase] = append(series[p.Phase], *v)
			all = append(all, *v)
		}
	}
	hi := 1.0
	if len(all) > 0 {
		hi = slices.Max(all) * 1.05
	}
	c := newChart(name+" CDF by phase", name+" (ms)", "share of requests ≤ x", 1000, 300, 0, hi, 0, 1)
	c.axes()
	if len(all) == 0 {
		c.note("no " + name + " samples")
		return c.String()
	}
	var names, colors []string
	for i, s := range series {
		if len(s) == 0 {
			continue
		}
		slices.Sort(s)
		step := max(1, len(s)/400)
		pts := [][2]float64{{0, 0}}
		for k := 0; k < len(s); k += step {
			pts = append(pts, [2]float64{s[k], float64(k+1) / float64(len(s))})
		}
		pts = append(pts, [2]float64{s[len(s)-1], 1})
		col := palette[i%len(palette)]
		c.polyline(pts, col)
		names = append(names, fmt.Sprintf("%s (n=%d)", r.Phases[i].Name, len(s)))
		colors = append(colors, col)
	}
	for _, t := range r.Spec.Thresholds {
		if t.Max != nil && t.Phase == "" && strings.HasPrefix(t.Metric, strings.ToLower(name)+"_ms.") {
			c.b.WriteString(verticalLimit(c, *t.Max, t.String()))
		}
	}
	c.legend(names, colors)
	return c.String()
}

// sweepAbbrev is the short label of a sweep's load: c for concurrency, r
// for rate.
func sweepAbbrev(mode string) string {
	if mode == "rate" {
		return "r"
	}
	return "c"
}

func verticalLimit(c *chart, x float64, label string) string {
	if x < c.x0 || x > c.x1 {
		return ""
	}
	return fmt.Sprintf(`<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#c62828" stroke-dasharray="6 4"/><text x="%.1f" y="%g" fill="#c62828">%s</text>`,
		c.px(x), c.top, c.px(x), c.h-c.bottom, c.px(x)+4, c.h-c.bottom-6, html.EscapeString(label))
}

func curveChart(r *Report) string {
	if r.Sweep == nil || len(r.Sweep.Points) == 0 {
		c := newChart("Throughput vs TTFT p99", "throughput (tok/s)", "TTFT p99 (ms)", 1000, 300, 0, 1, 0, 1)
		c.axes()
		c.note("no sweep in this run (edgeinfer bench --sweep)")
		return c.String()
	}
	pts := slices.Clone(r.Sweep.Points)
	slices.SortFunc(pts, func(a, b SweepPoint) int {
		switch {
		case a.Load < b.Load:
			return -1
		case a.Load > b.Load:
			return 1
		}
		return 0
	})
	var xs, ys []float64
	for _, p := range pts {
		if p.ThroughputTokS != nil && p.TTFTP99 != nil {
			xs, ys = append(xs, *p.ThroughputTokS), append(ys, *p.TTFTP99)
		}
	}
	if len(xs) == 0 {
		c := newChart("Throughput vs TTFT p99", "throughput (tok/s)", "TTFT p99 (ms)", 1000, 300, 0, 1, 0, 1)
		c.axes()
		c.note("no sweep point produced tokens")
		return c.String()
	}
	ymax := slices.Max(ys) * 1.15
	for _, t := range r.Spec.Thresholds {
		if t.Metric == "ttft_ms.p99" && t.Max != nil && t.Phase == "" {
			ymax = max(ymax, *t.Max*1.1)
		}
	}
	c := newChart(fmt.Sprintf("Throughput vs TTFT p99 (sweep over %s, %s=…; green = stable, red = SLOs missed)", r.Sweep.Mode, sweepAbbrev(r.Sweep.Mode)), "throughput (tok/s)", "TTFT p99 (ms)",
		1000, 320, 0, slices.Max(xs)*1.15, 0, ymax)
	c.axes()
	var line [][2]float64
	var why []string
	for _, p := range pts {
		if p.ThroughputTokS == nil || p.TTFTP99 == nil {
			continue
		}
		xy := [2]float64{*p.ThroughputTokS, *p.TTFTP99}
		line = append(line, xy)
		col := "#1a7f37"
		if !p.Stable {
			col = "#c62828"
		}
		c.points([][2]float64{xy}, col, 5)
		// Low loads crowd together at the left: alternate the labels
		// above and below their points.
		dy := -8.0
		if len(line)%2 == 0 {
			dy = 16
		}
		label := fmt.Sprintf("%s=%g", sweepAbbrev(r.Sweep.Mode), p.Load)
		if !p.Stable && p.Why != "" {
			// The chart plots TTFT only: the list below says which
			// criterion failed.
			label += " ✗"
			why = append(why, label[:len(label)-len(" ✗")]+": "+p.Why)
		}
		x, anchor := c.px(xy[0])+7, "start"
		if x > c.w*0.85 {
			x, anchor = c.px(xy[0])-7, "end"
		}
		c.text(x, c.py(xy[1])+dy, anchor, "", label)
	}
	c.polyline(line, "#888")
	for _, t := range r.Spec.Thresholds {
		if t.Metric == "ttft_ms.p99" && t.Max != nil && t.Phase == "" {
			c.hline(*t.Max, "#c62828", t.String())
		}
	}
	out := c.String()
	if len(why) > 0 {
		out += "<p>✗ unstable: " + html.EscapeString(strings.Join(why, "; ")) + "</p>"
	}
	return out
}

// timelineCharts draws TTFT per request, queue depth and decode rate, and
// the power and temperature traces (or why there are none), over the run
// with the phases as bands.
func timelineCharts(r *Report) []string {
	end := r.WallS
	bands := func(c *chart) {
		if len(r.Phases) > 0 && r.Phases[0].StartS > 0 {
			c.band(0, r.Phases[0].StartS, "#999", "warm-up")
		}
		for i, p := range r.Phases {
			c.band(p.StartS, p.EndS, palette[i%len(palette)], p.Name)
		}
		if r.Sweep != nil {
			short := sweepAbbrev(r.Sweep.Mode)
			for i, p := range r.Sweep.Points {
				fill := "#999"
				if i%2 == 1 {
					fill = "#555"
				}
				c.band(p.StartS, p.EndS, fill, fmt.Sprintf("%s=%g", short, p.Load))
			}
		}
	}
	var out []string
	var ttft [][2]float64
	var ymax float64 = 1
	for _, p := range r.Requests {
		if p.TTFTMs != nil {
			ttft = append(ttft, [2]float64{p.T, *p.TTFTMs})
			ymax = max(ymax, *p.TTFTMs*1.1)
		}
	}
	c := newChart("TTFT of each request by arrival time", "time into run (s)", "TTFT (ms)", 1000, 260, 0, end, 0, ymax)
	c.axes()
	bands(c)
	c.points(ttft, "#0072B2", 2)
	for _, t := range r.Spec.Thresholds {
		if t.Metric == "ttft_ms.p99" && t.Max != nil && t.Phase == "" {
			c.hline(*t.Max, "#c62828", t.String())
		}
	}
	out = append(out, c.String())

	var queued, running, toks [][2]float64
	qmax, tmax := 1.0, 1.0
	for _, p := range r.Timeline {
		queued = append(queued, [2]float64{p.T, float64(p.Queued)})
		running = append(running, [2]float64{p.T, float64(p.Running)})
		qmax = max(qmax, float64(p.Queued)*1.1, float64(p.Running)*1.1)
		toks = append(toks, [2]float64{p.T, p.TokS})
		tmax = max(tmax, p.TokS*1.1)
	}
	c = newChart("Queue depth and running sequences", "time into run (s)", "requests", 1000, 220, 0, end, 0, qmax)
	c.axes()
	bands(c)
	c.polyline(queued, palette[5])
	c.polyline(running, palette[0])
	c.legendAbove([]string{"queued", "running (holding KV)"}, []string{palette[5], palette[0]})
	out = append(out, c.String())

	c = newChart("Decode throughput", "time into run (s)", "tokens/s", 1000, 220, 0, end, 0, tmax)
	c.axes()
	bands(c)
	c.polyline(toks, palette[2])
	out = append(out, c.String())

	out = append(out, powerChart(r, bands), tempChart(r, bands))
	return out
}

func truncate(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
