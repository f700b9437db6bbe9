package loadgen

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/power"
	"github.com/edgeinfer/edgeinfer/pkg/power/powertest"
)

// fixtureFS loads one of pkg/power's fixture sysfs trees into a mutable
// powertest.FS, so a test can move the readings while a real sampler reads them.
func fixtureFS(t *testing.T, name string) *powertest.FS {
	t.Helper()
	root := os.DirFS("../../pkg/power/testdata/" + name)
	files := map[string]string{}
	err := fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(root, p)
		files[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return powertest.NewFS(files)
}

// sampledResult runs a real power sampler over fsys for d while step
// (called every 10 ms with the step index) moves the readings, and
// returns a Result with one phase spanning the sampling.
func sampledResult(t *testing.T, fsys fs.FS, d time.Duration, step func(i int)) *Result {
	t.Helper()
	ctx := context.Background()
	s := power.NewSampler(power.Probe(ctx, fsys, power.ProbeOptions{}), power.SamplerOptions{Period: 10 * time.Millisecond})
	defer s.Close()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; time.Since(start) < d; i++ {
		step(i)
		time.Sleep(10 * time.Millisecond) // on purpose: the readings move in real time, under a real sampler
	}
	end := time.Now()
	s.Stop()
	span := power.Span{Start: start, End: end}
	spec := Spec{Name: "trace", Phases: []Phase{{Name: "baseline", Kind: "baseline", Duration: Duration(d), Arrival: Arrival{Mode: "closed", Concurrency: 1}}}}
	return &Result{Spec: spec, Model: "none", Start: start, End: end,
		Phases:     []PhaseRun{{Phase: spec.Phases[0], Start: start, End: end}},
		Power:      s.Report(span, power.Span{}, power.Span{}),
		PowerTrace: s.PowerTrace(span), TempTrace: s.TempTrace(span)}
}

// TestTimelinePowerAndTemperatureLines samples the Jetson Orin Nano
// fixture (INA3221 VDD_IN and five thermal zones) while the input current
// and the CPU zone's temperature climb, and checks that report.html draws
// both as lines and report.json carries both traces.
func TestTimelinePowerAndTemperatureLines(t *testing.T) {
	const ina = "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1/"
	m := fixtureFS(t, "jetson-orin-nano")
	res := sampledResult(t, m, 400*time.Millisecond, func(i int) {
		m.Set(ina+"curr1_input", strconv.Itoa(1000+20*i))                        // mA at 5.072 V
		m.Set("sys/class/thermal/thermal_zone0/temp", strconv.Itoa(48000+100*i)) // m°C
	})
	if len(res.PowerTrace) < 5 || len(res.TempTrace) < 5 {
		t.Fatalf("sampler traces: %d power, %d temperature points", len(res.PowerTrace), len(res.TempTrace))
	}
	rep := BuildReport(res)
	if rep.Power.EnergyJ == nil {
		t.Fatalf("no energy from the fixture: %+v", rep.Power.UnavailableReasons)
	}
	var page strings.Builder
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, title, color string }{
		{"power", "Power: ", palette[5]},
		{"temperature", "Temperature (hottest thermal zone)", palette[3]},
	} {
		svg := svgWithTitle(page.String(), c.title)
		if svg == "" {
			t.Fatalf("no %s chart titled %q", c.name, c.title)
		}
		line := polylineOf(svg, c.color)
		if n := len(strings.Fields(line)); n < 5 {
			t.Errorf("%s chart: polyline with %d points: %q", c.name, n, line)
		}
		if strings.Contains(svg, "unavailable") || strings.Contains(svg, "no thermal zone") {
			t.Errorf("%s chart still shows the unavailable note", c.name)
		}
	}
	// The power rises with the current: the line's last point is higher
	// on the page (smaller y) than its first.
	pts := strings.Fields(polylineOf(svgWithTitle(page.String(), "Power: "), palette[5]))
	if y0, y1 := yOf(t, pts[0]), yOf(t, pts[len(pts)-1]); !(y1 < y0) {
		t.Errorf("power line does not rise: first y %v, last y %v", y0, y1)
	}

	b, err := rep.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Power struct {
			EnergyJ *float64     `json:"energy_j"`
			TraceW  []TracePoint `json:"trace_w"`
			TempC   []TracePoint `json:"temp_c"`
		} `json:"power"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	if len(j.Power.TraceW) == 0 || len(j.Power.TempC) == 0 || j.Power.EnergyJ == nil {
		t.Fatalf("report.json power: %d power points, %d temperature points, energy %v", len(j.Power.TraceW), len(j.Power.TempC), j.Power.EnergyJ)
	}
	if w := j.Power.TraceW[0].V; w < 4 || w > 8 {
		t.Errorf("first power point %.2f W, want about 5.07 V × 1.0–1.2 A", w)
	}
	if c := j.Power.TempC[len(j.Power.TempC)-1].V; c < 48 {
		t.Errorf("last temperature %.1f °C, want the climbing cpu zone (≥ 48)", c)
	}
}

// TestTimelineNoSensorKeepsNote: with no sensor at all the timeline keeps
// the "unavailable: reasons" note and draws no power or temperature line,
// and report.json's traces are null.
func TestTimelineNoSensorKeepsNote(t *testing.T) {
	res := sampledResult(t, powertest.NewFS(map[string]string{}), 50*time.Millisecond, func(int) {})
	rep := BuildReport(res)
	var page strings.Builder
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	svg := svgWithTitle(page.String(), "Power")
	if !strings.Contains(svg, "power: unavailable on this device (energy_j = null)") || strings.Contains(svg, "<polyline") {
		t.Errorf("power chart without a sensor: %s", svg)
	}
	if svg := svgWithTitle(page.String(), "Temperature"); !strings.Contains(svg, "no thermal zone found") || strings.Contains(svg, "<polyline") {
		t.Errorf("temperature chart without a zone: %s", svg)
	}
	b, _ := rep.JSON()
	var j struct {
		Power map[string]any `json:"power"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"trace_w", "temp_c", "energy_j"} {
		if v, ok := j.Power[k]; !ok || v != nil {
			t.Errorf("power.%s = %v (present %v), want null", k, v, ok)
		}
	}
}

func TestDownsampleKeepsGaps(t *testing.T) {
	start := time.Unix(1000, 0)
	var tr []power.TracePoint
	for i := range 2000 {
		if i >= 800 && i < 1200 { // a 4 s hole
			continue
		}
		tr = append(tr, power.TracePoint{T: start.Add(time.Duration(i) * 10 * time.Millisecond), V: float64(i % 10)})
	}
	out := downsample(tr, start, start.Add(20*time.Second), 100)
	if len(out) > 100 || len(out) < 70 {
		t.Fatalf("%d points", len(out))
	}
	for _, p := range out {
		if p.V < 4 || p.V > 5 {
			t.Fatalf("bucket mean %v, want 4.5", p.V)
		}
	}
	if segs := segments(out); len(segs) != 2 {
		t.Fatalf("%d segments, want the hole to split the line in 2", len(segs))
	}
}

// svgWithTitle returns the <svg> element whose title text starts with
// title, or "".
func svgWithTitle(page, title string) string {
	for _, part := range strings.Split(page, "<svg ")[1:] {
		svg, _, _ := strings.Cut(part, "</svg>")
		if strings.Contains(svg, `font-weight="bold">`+title) {
			return svg
		}
	}
	return ""
}

// polylineOf returns the points of the first polyline stroked in color.
func polylineOf(svg, color string) string {
	for _, part := range strings.Split(svg, "<polyline ")[1:] {
		if strings.Contains(part, `stroke="`+color+`"`) {
			pts, _, _ := strings.Cut(strings.TrimPrefix(part, `points="`), `"`)
			return pts
		}
	}
	return ""
}

func yOf(t *testing.T, pt string) float64 {
	t.Helper()
	_, y, _ := strings.Cut(pt, ",")
	v, err := strconv.ParseFloat(y, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
