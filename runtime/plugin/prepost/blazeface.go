package prepost

import (
	"context"
	"math"
	"sort"
)

// Face is a detection in normalised image coordinates [0,1].
type Face struct {
	Score                  float64
	XMin, YMin, XMax, YMax float64
}

// blazeFaceAnchors is BlazeFaceAnchors, computed once.
var blazeFaceAnchors = BlazeFaceAnchors()

// BlazeFaceAnchors are the SSD anchor centres of the 128x128 front model:
// strides 8 (16x16 cells, 2 anchors each) and 16 (8x8 cells, 6 anchors
// each: three layers of 2 share the grid), 512+384 = 896, in the model's
// output order.
func BlazeFaceAnchors() [][2]float64 {
	out := make([][2]float64, 0, 896)
	for _, layer := range []struct{ grid, perCell int }{{16, 2}, {8, 6}} {
		for y := range layer.grid {
			for x := range layer.grid {
				for range layer.perCell {
					out = append(out, [2]float64{(float64(x) + 0.5) / float64(layer.grid), (float64(y) + 0.5) / float64(layer.grid)})
				}
			}
		}
	}
	return out
}

// DecodeBlazeFace turns raw scores (896 logits) and regressors (896x16:
// dx, dy, w, h, then six keypoints, in input pixels of a size x size
// input) into faces with sigmoid score >= threshold, merged by weighted
// non-maximum suppression (IoU 0.3) as MediaPipe does.
func DecodeBlazeFace(scores, boxes []float32, size int, threshold float64) []Face {
	return WeightedNMS(BlazeFaceCandidates(scores, boxes, size, threshold), 0.3)
}

// BlazeFaceCandidates is DecodeBlazeFace before the merge: the anchors'
// boxes with sigmoid score >= threshold, in anchor order.
func BlazeFaceCandidates(scores, boxes []float32, size int, threshold float64) []Face {
	fs := float64(size)
	var cands []Face
	// The sigmoid is monotonic: a logit below the threshold's is skipped
	// before its exponential (most of the 896 anchors; an exponential per
	// anchor was most of a Go plugin's time, BenchmarkBlazeFaceDecode).
	// The exact test follows for those that pass.
	minLogit := math.Inf(-1)
	if threshold > 0 && threshold < 1 {
		minLogit = math.Log(threshold/(1-threshold)) - 1e-9
	}
	for i := range min(len(scores), 896) {
		if float64(scores[i]) < minLogit || 16*i+3 >= len(boxes) {
			continue
		}
		s := 1 / (1 + math.Exp(-math.Max(-100, math.Min(100, float64(scores[i])))))
		if s < threshold {
			continue
		}
		a := blazeFaceAnchors[i]
		r := boxes[16*i:]
		cx := float64(r[0])/fs + a[0]
		cy := float64(r[1])/fs + a[1]
		w, h := float64(r[2])/fs, float64(r[3])/fs
		cands = append(cands, Face{Score: s, XMin: cx - w/2, YMin: cy - h/2, XMax: cx + w/2, YMax: cy + h/2})
	}
	return cands
}

// WeightedNMS sorts candidates by score and merges each group overlapping
// the best remaining one by at least iouMin into their score-weighted mean
// box (MediaPipe's weighted NMS); the group's best score is kept. cands is
// reordered.
func WeightedNMS(cands []Face, iouMin float64) []Face {
	faces, _ := WeightedNMSContext(context.Background(), cands, iouMin)
	return faces
}

// WeightedNMSContext is WeightedNMS that stops with ctx's error: its cost
// grows with the square of the candidates, so a caller that takes them
// from untrusted input (a plugin through the host) bounds it by a deadline.
// ctx is checked once per merged group (one pass over the candidates).
func WeightedNMSContext(ctx context.Context, cands []Face, iouMin float64) ([]Face, error) {
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].Score > cands[j].Score })
	var faces []Face
	used := make([]bool, len(cands))
	for i := range cands {
		if used[i] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var sum, xmin, ymin, xmax, ymax float64
		for j := i; j < len(cands); j++ {
			if used[j] || IoU(cands[i], cands[j]) < iouMin {
				continue
			}
			used[j] = true
			c := cands[j]
			sum += c.Score
			xmin += c.XMin * c.Score
			ymin += c.YMin * c.Score
			xmax += c.XMax * c.Score
			ymax += c.YMax * c.Score
		}
		faces = append(faces, Face{Score: cands[i].Score, XMin: xmin / sum, YMin: ymin / sum, XMax: xmax / sum, YMax: ymax / sum})
	}
	return faces, nil
}

// IoU is the intersection over union of two boxes (0 for empty ones).
func IoU(a, b Face) float64 {
	ix := math.Max(0, math.Min(a.XMax, b.XMax)-math.Max(a.XMin, b.XMin))
	iy := math.Max(0, math.Min(a.YMax, b.YMax)-math.Max(a.YMin, b.YMin))
	inter := ix * iy
	union := (a.XMax-a.XMin)*(a.YMax-a.YMin) + (b.XMax-b.XMin)*(b.YMax-b.YMin) - inter
	if union <= 0 {
		return 0
	}
	return inter / union
}
