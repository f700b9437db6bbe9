package quant

import "math"

// Output agreement between a reference model and its quantised form, for
// one-shot models: cosine similarity of outputs, and for detectors
// producing a probability map (PaddleOCR's DB head) the agreement of the
// boxes each map yields.

// Cosine is the cosine similarity of a and b (1 for identical directions;
// 0 when either is all zeros). Lengths must match; the shorter one rules.
func Cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range min(len(a), len(b)) {
		x, y := float64(a[i]), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

// Box is an axis-aligned box in pixels, [X0, X1) × [Y0, Y1).
type Box struct{ X0, Y0, X1, Y1 int }

// Area is the box's pixel count.
func (b Box) Area() int { return max(b.X1-b.X0, 0) * max(b.Y1-b.Y0, 0) }

// IoU is the intersection over union of a and b.
func IoU(a, b Box) float64 {
	in := Box{max(a.X0, b.X0), max(a.Y0, b.Y0), min(a.X1, b.X1), min(a.Y1, b.Y1)}.Area()
	u := a.Area() + b.Area() - in
	if u == 0 {
		return 0
	}
	return float64(in) / float64(u)
}

// MapBoxes thresholds an h×w probability map at thr and returns the
// bounding box of every 4-connected component of at least minArea pixels
// (DB post-processing without the polygon unclip).
func MapBoxes(prob []float32, h, w int, thr float32, minArea int) []Box {
	seen := make([]bool, h*w)
	var boxes []Box
	var stack []int
	for start := range h * w {
		if seen[start] || prob[start] <= thr {
			continue
		}
		seen[start] = true
		stack = append(stack[:0], start)
		b := Box{w, h, 0, 0}
		n := 0
		for len(stack) > 0 {
			p := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			n++
			y, x := p/w, p%w
			b = Box{min(b.X0, x), min(b.Y0, y), max(b.X1, x+1), max(b.Y1, y+1)}
			for _, q := range [4][2]int{{y - 1, x}, {y + 1, x}, {y, x - 1}, {y, x + 1}} {
				if q[0] < 0 || q[0] >= h || q[1] < 0 || q[1] >= w {
					continue
				}
				i := q[0]*w + q[1]
				if !seen[i] && prob[i] > thr {
					seen[i] = true
					stack = append(stack, i)
				}
			}
		}
		if n >= minArea {
			boxes = append(boxes, b)
		}
	}
	return boxes
}

// MatchBoxes greedily pairs got with ref boxes at IoU ≥ minIoU (best pairs
// first, each box used once) and returns the number of matches.
// Precision is matches/len(got), recall matches/len(ref).
func MatchBoxes(ref, got []Box, minIoU float64) int {
	type pair struct {
		i, j int
		iou  float64
	}
	var pairs []pair
	for i, r := range ref {
		for j, g := range got {
			if v := IoU(r, g); v >= minIoU {
				pairs = append(pairs, pair{i, j, v})
			}
		}
	}
	// Insertion order by IoU, descending: box counts are small.
	for a := 1; a < len(pairs); a++ {
		for b := a; b > 0 && pairs[b].iou > pairs[b-1].iou; b-- {
			pairs[b], pairs[b-1] = pairs[b-1], pairs[b]
		}
	}
	usedR, usedG := map[int]bool{}, map[int]bool{}
	n := 0
	for _, p := range pairs {
		if !usedR[p.i] && !usedG[p.j] {
			usedR[p.i], usedG[p.j] = true, true
			n++
		}
	}
	return n
}
