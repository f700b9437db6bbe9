package loadgen

import (
	"fmt"
	"io"
	"strings"
)

// WriteMarkdown writes report.md: the summary, verdicts, phases, power and
// version matrix as Markdown tables (the charts are in report.html).
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# edgeinfer bench: %s — %s\n\n", r.Name, strings.ToUpper(r.Status))
	fmt.Fprintf(&b, "Model `%s`, started %s, %.1f s, schema `%s`. Prompts: %s.\n\n", r.Model, r.Started.Format("2006-01-02 15:04:05 MST"), r.WallS, Schema, r.Workload.Prompts)
	for _, sec := range []struct {
		title string
		rows  [][]string
	}{{"Summary", summaryRows(r)}, {"Verdicts", verdictRows(r, true)}, {"Phases", phaseRows(r)}, {"Resources per window", resourceRows(r)}, {"Power", powerRows(r)}, {"Version matrix", versionRows(r)}} {
		fmt.Fprintf(&b, "## %s\n\n", sec.title)
		writeMDTable(&b, sec.rows)
	}
	if r.Recovery != nil {
		b.WriteString("## Burst and recovery\n\n")
		writeMDTable(&b, recoveryRows(r.Recovery))
	}
	if sw := r.Sweep; sw != nil {
		b.WriteString("## Sweep (throughput–latency curve)\n\n")
		fmt.Fprintf(&b, "Criteria: %s; %s trials.\n\n", strings.Join(sw.Criteria, "; "), sw.Trial.D())
		rows := [][]string{{sw.Mode, "requests", "throughput tok/s", "goodput tok/s", "TTFT p50/p99", "ITL p99", "SLO att.", "stable", "why"}}
		for _, p := range sw.Points {
			rows = append(rows, []string{fmt.Sprint(p.Load), fmt.Sprint(p.Requests), fmtPtr(p.ThroughputTokS, 1), fmtPtr(p.GoodputTokS, 1),
				fmtPtr(p.TTFTP50, 1) + " / " + fmtPtr(p.TTFTP99, 1), fmtPtr(p.ITLP99, 2), fmtPtr(p.SLOAttainment, 3), fmt.Sprint(p.Stable), p.Why})
		}
		writeMDTable(&b, rows)
	}
	if len(r.Notes) > 0 {
		b.WriteString("## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeMDTable(b *strings.Builder, rows [][]string) {
	for i, row := range rows {
		b.WriteString("|")
		for _, c := range row {
			c = strings.TrimPrefix(c, "\x00")
			fmt.Fprintf(b, " %s |", strings.ReplaceAll(c, "|", `\|`))
		}
		b.WriteString("\n")
		if i == 0 {
			b.WriteString(strings.Repeat("|---", len(row)) + "|\n")
		}
	}
	b.WriteString("\n")
}
