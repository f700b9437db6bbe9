// Command blazeface decodes BlazeFace's anchors and merges detections by
// weighted non-maximum suppression (see package plugins).
package main

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/guest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

func init() { guest.Handle(run) }

func main() {}

// The model's outputs: scores for the 16x16 and 8x8 grids, then their box
// regressors (face_detection_front_128x128_barracuda.onnx).
var names = [4]string{"Identity:0", "Identity_1:0", "Identity_2:0", "Identity_3:0"}

func run(in []abi.Tensor) ([]abi.Tensor, error) {
	iou, err := guest.ArgFloat(in, "iou", 0.3)
	if err != nil {
		return nil, err
	}
	var faces []prepost.Face
	if c, ok := abi.Find(in, "candidates"); ok {
		v, err := c.Float32s()
		if err != nil || len(c.Shape) != 2 || c.Shape[1] != 5 {
			return nil, fmt.Errorf("input candidates is %v, want float32 [N,5]", c)
		}
		cands := make([]prepost.Face, c.Shape[0])
		for i := range cands {
			r := v[5*i:]
			cands[i] = prepost.Face{Score: float64(r[0]), XMin: float64(r[1]), YMin: float64(r[2]), XMax: float64(r[3]), YMax: float64(r[4])}
		}
		faces = prepost.WeightedNMS(cands, iou)
	} else {
		thr, err := guest.ArgFloat(in, "threshold", 0.75)
		if err != nil {
			return nil, err
		}
		var parts [4][]float32
		for i, n := range names {
			t, err := guest.Input(in, n, abi.Float32)
			if err != nil {
				return nil, err
			}
			parts[i], _ = t.Float32s()
		}
		scores := append(append([]float32{}, parts[0]...), parts[1]...)
		boxes := append(append([]float32{}, parts[2]...), parts[3]...)
		if len(scores) != 896 || len(boxes) != 896*16 {
			return nil, fmt.Errorf("%d scores and %d box values, want 896 and 896x16", len(scores), len(boxes))
		}
		faces = prepost.DecodeBlazeFace(scores, boxes, 128, thr)
	}
	out := make([]float32, 0, 5*len(faces))
	for _, f := range faces {
		out = append(out, float32(f.Score), float32(f.XMin), float32(f.YMin), float32(f.XMax), float32(f.YMax))
	}
	return []abi.Tensor{abi.F32("faces", []int64{int64(len(faces)), 5}, out)}, nil
}
