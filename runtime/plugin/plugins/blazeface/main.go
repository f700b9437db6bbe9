// Command blazeface decodes BlazeFace's anchors and merges detections by
// weighted non-maximum suppression (see package plugins). The anchors are
// decoded here (896 of them); the merge, quadratic in the candidates, is
// the host's nms.weighted primitive (runtime/plugin/primitive).
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
	cands, ok := abi.Find(in, "candidates")
	if !ok {
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
		faces := prepost.BlazeFaceCandidates(scores, boxes, 128, thr)
		flat := make([]float32, 0, 5*len(faces))
		for _, f := range faces {
			flat = append(flat, float32(f.Score), float32(f.XMin), float32(f.YMin), float32(f.XMax), float32(f.YMax))
		}
		cands, iou = abi.F32("candidates", []int64{int64(len(faces)), 5}, flat), 0.3 // MediaPipe's merge
	}
	return guest.Host("nms.weighted", []abi.Tensor{cands, abi.F64("iou", nil, []float64{iou})})
}
