package fleet

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// DeviceStatus is one row of `edgeinfer fleet status`.
type DeviceStatus struct {
	Device   string `json:"device"`
	Board    string `json:"board"`
	Online   bool   `json:"online"`
	Model    string `json:"model,omitempty"`
	Active   string `json:"active,omitempty"`
	Previous string `json:"previous,omitempty"`
	// Health is the latest update's outcome: ok, updating, failed,
	// refused, rolled_back (or "" before any).
	Health   string `json:"health"`
	Reason   string `json:"reason,omitempty"`
	LastSeen string `json:"last_seen,omitempty"`
	// Rollout and Step: the newest rollout that targets the device, and
	// where the device stands in it.
	Rollout string `json:"rollout,omitempty"`
	Step    Step   `json:"step,omitempty"`
	// TTFTP99MS and GoodputTokS come from the latest telemetry; null
	// when the device sent none, or its interval had no requests.
	TTFTP99MS   *float64 `json:"ttft_p99_ms"`
	GoodputTokS *float64 `json:"goodput_tok_s"`
}

// RolloutStatus is a rollout with its devices counted per step.
type RolloutStatus struct {
	ID       string       `json:"id"`
	Release  string       `json:"release"`
	State    string       `json:"state"`
	Reason   string       `json:"reason,omitempty"`
	Wave     string       `json:"wave"` // "2/3 (50 %)"
	Targets  int          `json:"targets"`
	Assigned int          `json:"assigned"`
	Steps    map[Step]int `json:"steps"`
}

// StatusReport is `edgeinfer fleet status --json`.
type StatusReport struct {
	Fleet     string          `json:"fleet"`
	Time      string          `json:"time"`
	Instances []string        `json:"serve_instances"`
	Devices   []DeviceStatus  `json:"devices"`
	Rollouts  []RolloutStatus `json:"rollouts"`
	// Versions counts devices by active version.
	Versions map[string]int `json:"versions"`
}

// Report summarises a view.
func Report(v *View, now time.Time) StatusReport {
	devs := v.Devices()
	outs := v.Rollouts()
	rep := StatusReport{Fleet: v.fleet, Time: now.UTC().Format(time.RFC3339), Instances: v.Instances(), Versions: map[string]int{}}
	for _, id := range slices.Sorted(maps.Keys(devs)) {
		d := devs[id]
		row := DeviceStatus{Device: id, Board: d.Board(), Online: d.Online()}
		if !d.LastSeen.IsZero() {
			row.LastSeen = d.LastSeen.UTC().Format(time.RFC3339)
		}
		if u := d.Update; u != nil {
			row.Model, row.Active, row.Previous = u.Model, u.Active, u.Previous
			row.Health, row.Reason = healthOf(string(u.Phase), u.LastEvent), u.Reason
			if u.LastEvent == "refused" && u.Refused != "" {
				row.Reason = u.Refused
			}
		}
		if p := d.Perf; p != nil {
			row.TTFTP99MS = p.TTFTP99MS
			if p.Requests > 0 {
				g := p.GoodputTokS
				row.GoodputTokS = &g
			}
		}
		for i := len(outs) - 1; i >= 0; i-- {
			if st := outs[i].DeviceStep(id, d); st != "" {
				row.Rollout, row.Step = outs[i].ID, st
				break
			}
		}
		rep.Versions[row.Active]++
		rep.Devices = append(rep.Devices, row)
	}
	for _, r := range outs {
		rs := RolloutStatus{ID: r.ID, Release: r.Model + "@" + r.Version, State: r.State, Reason: r.Reason,
			Targets: len(r.Targets), Assigned: r.Assigned, Steps: r.Counts(devs)}
		rs.Wave = fmt.Sprintf("%d/%d (%d %%)", r.Wave+1, len(r.Waves), r.Waves[r.Wave])
		rep.Rollouts = append(rep.Rollouts, rs)
	}
	return rep
}

func healthOf(p, last string) string {
	switch {
	case last == "refused":
		return "refused"
	case p == "active" || p == "":
		return "ok"
	case p == "downloading" || p == "staged" || p == "checking":
		return "updating"
	case p == "abandoned":
		return "ok"
	}
	return p
}

// WriteTable prints the report as tables.
func (rep StatusReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "fleet %s at %s; serve instances: %s\n\n", rep.Fleet, rep.Time, orDash(strings.Join(rep.Instances, ",")))
	fmt.Fprintln(tw, "DEVICE\tBOARD\tLINK\tACTIVE\tPREVIOUS\tHEALTH\tLAST SEEN\tROLLOUT\tSTEP\tTTFT p99 ms\tGOODPUT tok/s")
	for _, d := range rep.Devices {
		link := "offline"
		if d.Online {
			link = "online"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Device, orDash(d.Board), link, orDash(d.Active), orDash(d.Previous),
			orDash(d.Health), orDash(d.LastSeen), orDash(d.Rollout), orDash(string(d.Step)), num(d.TTFTP99MS), num(d.GoodputTokS))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "ROLLOUT\tRELEASE\tSTATE\tWAVE\tTARGETS\tWAITING\tASSIGNED\tUPDATING\tUPDATED\tFAILED\tREFUSED\tROLLED BACK\tREASON")
	for _, r := range rep.Rollouts {
		s := r.Steps
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r.ID, r.Release, r.State, r.Wave, r.Targets,
			s[StepWaiting], s[StepAssigned], s[StepUpdating], s[StepUpdated], s[StepFailed], s[StepRefused], s[StepRolledBack], r.Reason)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func num(p *float64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprintf("%.1f", *p)
}
