package loadgen

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// chart is a tiny SVG writer for line, point and band charts with linear
// axes. It writes markup into a builder; String returns the <svg> element.
// A chart is not safe for concurrent use.
type chart struct {
	w, h                     float64
	left, right, top, bottom float64
	x0, x1, y0, y1           float64
	b                        strings.Builder
}

// palette is colour-blind-friendly (Okabe–Ito).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"}

func newChart(title, xlabel, ylabel string, w, h float64, x0, x1, y0, y1 float64) *chart {
	if !(x1 > x0) {
		x1 = x0 + 1
	}
	if !(y1 > y0) {
		y1 = y0 + 1
	}
	c := &chart{w: w, h: h, left: 64, right: 16, top: 30, bottom: 44, x0: x0, x1: x1, y0: y0, y1: y1}
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`, w, h, w, h)
	fmt.Fprintf(&c.b, `<rect width="%g" height="%g" fill="#fff"/>`, w, h)
	c.text(w/2, 18, "middle", "bold", title)
	c.text(c.left+(w-c.left-c.right)/2, h-8, "middle", "", xlabel)
	fmt.Fprintf(&c.b, `<text transform="translate(14,%g) rotate(-90)" text-anchor="middle">%s</text>`, c.top+(h-c.top-c.bottom)/2, html.EscapeString(ylabel))
	return c
}

func (c *chart) px(x float64) float64 {
	return c.left + (x-c.x0)/(c.x1-c.x0)*(c.w-c.left-c.right)
}

func (c *chart) py(y float64) float64 {
	return c.h - c.bottom - (y-c.y0)/(c.y1-c.y0)*(c.h-c.top-c.bottom)
}

func (c *chart) text(x, y float64, anchor, weight, s string) {
	w := ""
	if weight != "" {
		w = ` font-weight="` + weight + `"`
	}
	fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f" text-anchor="%s"%s>%s</text>`, x, y, anchor, w, html.EscapeString(s))
}

// axes draws the frame, grid lines and tick labels at "nice" steps.
func (c *chart) axes() {
	for _, v := range niceTicks(c.x0, c.x1, 6) {
		x := c.px(v)
		fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#eee"/>`, x, c.top, x, c.h-c.bottom)
		c.text(x, c.h-c.bottom+16, "middle", "", fmtTick(v))
	}
	for _, v := range niceTicks(c.y0, c.y1, 5) {
		y := c.py(v)
		fmt.Fprintf(&c.b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#eee"/>`, c.left, y, c.w-c.right, y)
		c.text(c.left-6, y+4, "end", "", fmtTick(v))
	}
	fmt.Fprintf(&c.b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#888"/>`, c.left, c.top, c.w-c.left-c.right, c.h-c.top-c.bottom)
}

// band shades [x0, x1) across the plot with a label at its top.
func (c *chart) band(x0, x1 float64, fill, label string) {
	a, b := c.px(max(x0, c.x0)), c.px(min(x1, c.x1))
	fmt.Fprintf(&c.b, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="%s" fill-opacity="0.12"/>`, a, c.top, math.Max(b-a, 0), c.h-c.top-c.bottom, fill)
	c.text((a+b)/2, c.top+12, "middle", "", label)
}

func (c *chart) polyline(pts [][2]float64, color string) {
	if len(pts) == 0 {
		return
	}
	var sb strings.Builder
	for _, p := range pts {
		fmt.Fprintf(&sb, "%.1f,%.1f ", c.px(p[0]), c.py(p[1]))
	}
	fmt.Fprintf(&c.b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.8"/>`, strings.TrimSpace(sb.String()), color)
}

func (c *chart) points(pts [][2]float64, color string, r float64) {
	for _, p := range pts {
		fmt.Fprintf(&c.b, `<circle cx="%.1f" cy="%.1f" r="%g" fill="%s" fill-opacity="0.7"/>`, c.px(p[0]), c.py(p[1]), r, color)
	}
}

// hline draws a dashed horizontal limit line with a label.
func (c *chart) hline(y float64, color, label string) {
	if y < c.y0 || y > c.y1 {
		return
	}
	fmt.Fprintf(&c.b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="%s" stroke-dasharray="6 4"/>`, c.left, c.py(y), c.w-c.right, c.py(y), color)
	c.text(c.w-c.right-4, c.py(y)-4, "end", "", label)
}

// legend lists series names with their colours in the bottom-right
// corner of the plot, where a CDF has no line.
func (c *chart) legend(names, colors []string) {
	y := c.h - c.bottom - 8 - float64(len(names)-1)*15
	for i, n := range names {
		x := c.w - c.right - 170
		fmt.Fprintf(&c.b, `<rect x="%g" y="%g" width="10" height="10" fill="%s"/>`, x, y-9, colors[i])
		c.text(x+14, y, "start", "", n)
		y += 15
	}
}

// legendAbove lists series names in one row above the plot, left of the
// centred title, for charts whose lines fill every corner.
func (c *chart) legendAbove(names, colors []string) {
	x := c.left
	for i, n := range names {
		fmt.Fprintf(&c.b, `<rect x="%g" y="%g" width="10" height="10" fill="%s"/>`, x, c.top-15, colors[i])
		c.text(x+14, c.top-6, "start", "", n)
		x += 14 + 7*float64(len([]rune(n))) + 16
	}
}

// note writes a message in the middle of the plot (no data, no sensor).
func (c *chart) note(lines ...string) {
	y := c.top + (c.h-c.top-c.bottom)/2 - float64(len(lines)-1)*8
	for _, l := range lines {
		c.text(c.left+(c.w-c.left-c.right)/2, y, "middle", "", l)
		y += 16
	}
}

func (c *chart) String() string { return c.b.String() + "</svg>" }

// niceTicks returns about n ticks at 1, 2 or 5 × 10^k steps within [a, b].
func niceTicks(a, b float64, n int) []float64 {
	span := b - a
	if !(span > 0) || math.IsInf(span, 0) {
		return []float64{a}
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Ceil(a/step) * step; v <= b+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

func fmtTick(v float64) string {
	if math.Abs(v) >= 1000 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}
