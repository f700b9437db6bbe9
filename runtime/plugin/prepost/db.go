package prepost

import "math"

// DBSpec is PaddleOCR's DB post-processing (its DBPostProcess defaults).
type DBSpec struct {
	Thresh        float64 // binarisation of the probability map, 0.3
	BoxThresh     float64 // minimum mean probability inside a region, 0.6
	UnclipRatio   float64 // box growth, 1.5
	MinSize       float64 // shortest side kept (map pixels), 3
	MaxCandidates int     // regions considered, 1000
}

// PaddleDB is DBSpec with PaddleOCR's defaults.
var PaddleDB = DBSpec{Thresh: 0.3, BoxThresh: 0.6, UnclipRatio: 1.5, MinSize: 3, MaxCandidates: 1000}

// TextBox is a detected text region in source-image pixels: its
// axis-aligned box and its rotated one (Quad).
type TextBox struct {
	X0, Y0, X1, Y1 float64
	Score          float64
	Quad           Quad
}

// DBBoxes extracts text boxes from a w x h probability map (row-major)
// and scales them to a srcW x srcH image. Regions are the 8-connected
// components of the binarised map, each scored by the mean probability of
// its pixels and grown by distance area*UnclipRatio/perimeter, PaddleOCR's
// unclip. Each region gets an axis-aligned box (X0..Y1) and, as PaddleOCR
// does, its minimum-area rotated rectangle grown the same way (Quad), which
// holds one line of slanted text where the axis-aligned box takes in its
// neighbours too. (PaddleOCR offsets the rectangle with pyclipper, rounding
// its corners; a rectangle grown by d on each side is the same box.)
func DBBoxes(prob []float32, w, h, srcW, srcH int, s DBSpec) []TextBox {
	if w <= 0 || h <= 0 || len(prob) < w*h {
		return nil
	}
	thr := float32(s.Thresh)
	seen := make([]bool, w*h)
	var stack []int32
	// Each row's leftmost and rightmost pixel of the region being filled:
	// the region's convex hull needs only these.
	rowMin := make([]int32, h)
	rowMax := make([]int32, h)
	for i := range rowMin {
		rowMin[i], rowMax[i] = math.MaxInt32, -1
	}
	var pts [][2]float64
	var boxes []TextBox
	regions := 0
	sx, sy := float64(srcW)/float64(w), float64(srcH)/float64(h)
	for start := range w * h {
		if seen[start] || prob[start] <= thr {
			continue
		}
		if s.MaxCandidates > 0 && regions >= s.MaxCandidates {
			break
		}
		regions++
		seen[start] = true
		stack = append(stack[:0], int32(start))
		minX, minY, maxX, maxY := w, h, -1, -1
		var sum float64
		n := 0
		for len(stack) > 0 {
			p := int(stack[len(stack)-1])
			stack = stack[:len(stack)-1]
			x, y := p%w, p/w
			rowMin[y], rowMax[y] = min(rowMin[y], int32(x)), max(rowMax[y], int32(x))
			minX, maxX = min(minX, x), max(maxX, x)
			minY, maxY = min(minY, y), max(maxY, y)
			sum += float64(prob[p])
			n++
			for dy := -1; dy <= 1; dy++ {
				yy := y + dy
				if yy < 0 || yy >= h {
					continue
				}
				for dx := -1; dx <= 1; dx++ {
					xx := x + dx
					if xx < 0 || xx >= w {
						continue
					}
					q := yy*w + xx
					if !seen[q] && prob[q] > thr {
						seen[q] = true
						stack = append(stack, int32(q))
					}
				}
			}
		}
		pts = pts[:0]
		for y := minY; y <= maxY; y++ { // pixel corners of each row's ends
			if rowMax[y] >= 0 {
				l, r := float64(rowMin[y]), float64(rowMax[y]+1)
				pts = append(pts, [2]float64{l, float64(y)}, [2]float64{l, float64(y + 1)}, [2]float64{r, float64(y)}, [2]float64{r, float64(y + 1)})
			}
			rowMin[y], rowMax[y] = math.MaxInt32, -1
		}
		bw, bh := float64(maxX-minX+1), float64(maxY-minY+1)
		if min(bw, bh) < s.MinSize {
			continue
		}
		score := sum / float64(n)
		if score < s.BoxThresh {
			continue
		}
		d := bw * bh * s.UnclipRatio / (2 * (bw + bh))
		x0, y0 := float64(minX)-d, float64(minY)-d
		x1, y1 := float64(maxX+1)+d, float64(maxY+1)+d
		if min(x1-x0, y1-y0) < s.MinSize+2 {
			continue
		}
		c, u, long, short := minAreaRect(pts)
		rd := long * short * s.UnclipRatio / (2 * (long + short))
		q := quadOf(c, u, long+2*rd, short+2*rd)
		for i := range q {
			q[i] = [2]float64{clamp(q[i][0]*sx, 0, float64(srcW)), clamp(q[i][1]*sy, 0, float64(srcH))}
		}
		boxes = append(boxes, TextBox{
			X0: clamp(x0*sx, 0, float64(srcW)), Y0: clamp(y0*sy, 0, float64(srcH)),
			X1: clamp(x1*sx, 0, float64(srcW)), Y1: clamp(y1*sy, 0, float64(srcH)),
			Score: score, Quad: q,
		})
	}
	return boxes
}

func clamp(v, lo, hi float64) float64 { return min(max(v, lo), hi) }
