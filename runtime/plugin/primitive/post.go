package primitive

import (
	"context"
	"fmt"
	"math"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

func nmsWeighted(ctx context.Context, in []abi.Tensor, lim Limits) ([]abi.Tensor, error) {
	c, ok := abi.Find(in, "candidates")
	if !ok {
		return nil, fmt.Errorf("no input candidates (float32 [N,5])")
	}
	v, err := c.Float32s()
	if err != nil || len(c.Shape) != 2 || c.Shape[1] != 5 {
		return nil, fmt.Errorf("input candidates is %v, want float32 [N,5]", c)
	}
	iou, err := scalar(in, "iou", 0.3)
	if err != nil {
		return nil, err
	}
	n := c.Shape[0]
	// The candidates as float64, a mark each, and at most as many faces.
	if err := lim.allow(fmt.Sprintf("%d candidates", n), n*(40+1+40)); err != nil {
		return nil, err
	}
	cands := make([]prepost.Face, n)
	for i := range cands {
		r := v[5*i:]
		cands[i] = prepost.Face{Score: float64(r[0]), XMin: float64(r[1]), YMin: float64(r[2]), XMax: float64(r[3]), YMax: float64(r[4])}
	}
	faces, err := prepost.WeightedNMSContext(ctx, cands, iou)
	if err != nil {
		return nil, err
	}
	out := make([]float32, 0, 5*len(faces))
	for _, f := range faces {
		out = append(out, float32(f.Score), float32(f.XMin), float32(f.YMin), float32(f.XMax), float32(f.YMax))
	}
	return []abi.Tensor{abi.F32("faces", []int64{int64(len(faces)), 5}, out)}, nil
}

// argmaxRows: the first index of the largest value of each row, as
// prepost.CTCGreedy picks a step's class (the same function).
func argmaxRows(ctx context.Context, in []abi.Tensor, lim Limits) ([]abi.Tensor, error) {
	x, ok := abi.Find(in, "x")
	if !ok {
		return nil, fmt.Errorf("no input x (float32 [..., C])")
	}
	v, err := x.Float32s()
	if err != nil || len(x.Shape) == 0 || x.Shape[len(x.Shape)-1] == 0 {
		return nil, fmt.Errorf("input x is %v, want float32 [..., C] with C > 0", x)
	}
	cols := int(x.Shape[len(x.Shape)-1])
	rows := len(v) / cols
	if err := lim.allow(fmt.Sprintf("%d rows", rows), 8*int64(rows)); err != nil {
		return nil, err
	}
	idx := make([]int32, rows)
	val := make([]float32, rows)
	const chunk = 256 // rows between checks of ctx
	for r := 0; r < rows; r += chunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := min(chunk, rows-r)
		prepost.ArgmaxRows(v[r*cols:(r+n)*cols], cols, idx[r:r+n], val[r:r+n])
	}
	return []abi.Tensor{abi.I32("index", []int64{int64(rows)}, idx), abi.F32("value", []int64{int64(rows)}, val)}, nil
}

func dbBoxes(ctx context.Context, in []abi.Tensor, lim Limits) ([]abi.Tensor, error) {
	m, ok := abi.Find(in, "map")
	if !ok {
		return nil, fmt.Errorf("no input map (float32 [1,1,H,W] or [H,W])")
	}
	prob, err := m.Float32s()
	rank := len(m.Shape)
	if err != nil || !(rank == 2 || rank == 4 && m.Shape[0] == 1 && m.Shape[1] == 1) {
		return nil, fmt.Errorf("input map is %v, want float32 [1,1,H,W] or [H,W]", m)
	}
	h, w := int(m.Shape[rank-2]), int(m.Shape[rank-1])
	srcH, srcW := h, w
	if s, ok := abi.Find(in, "src_size"); ok {
		v, err := s.Int64s()
		if err != nil || len(v) != 2 || v[0] <= 0 || v[1] <= 0 || v[0] > math.MaxInt32 || v[1] > math.MaxInt32 {
			return nil, fmt.Errorf("input src_size is %v, want int64 [2] (h, w), positive", s)
		}
		srcH, srcW = int(v[0]), int(v[1])
	}
	spec := prepost.PaddleDB
	for _, f := range []struct {
		name string
		v    *float64
	}{{"thresh", &spec.Thresh}, {"box_thresh", &spec.BoxThresh}, {"unclip_ratio", &spec.UnclipRatio}, {"min_size", &spec.MinSize}} {
		if *f.v, err = scalar(in, f.name, *f.v); err != nil {
			return nil, err
		}
	}
	mc, err := scalar(in, "max_candidates", float64(spec.MaxCandidates))
	if err != nil {
		return nil, err
	}
	spec.MaxCandidates = int(min(max(mc, 0), math.MaxInt32))
	// A mark per pixel and, at worst, every pixel on the search stack.
	if err := lim.allow(fmt.Sprintf("a %dx%d map", w, h), 5*int64(w)*int64(h)); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	boxes := prepost.DBBoxes(prob, w, h, srcW, srcH, spec)
	coords := make([]float32, 0, 4*len(boxes))
	scores := make([]float32, 0, len(boxes))
	quads := make([]float32, 0, 8*len(boxes))
	for _, b := range boxes {
		coords = append(coords, float32(b.X0), float32(b.Y0), float32(b.X1), float32(b.Y1))
		scores = append(scores, float32(b.Score))
		for _, p := range b.Quad {
			quads = append(quads, float32(p[0]), float32(p[1]))
		}
	}
	n := int64(len(boxes))
	return []abi.Tensor{abi.F32("boxes", []int64{n, 4}, coords), abi.F32("scores", []int64{n}, scores),
		abi.F32("quads", []int64{n, 4, 2}, quads)}, nil
}
