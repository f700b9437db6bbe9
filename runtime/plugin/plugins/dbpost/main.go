// Command dbpost extracts text boxes from PaddleOCR's detector map (see
// package plugins).
package main

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/guest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

func init() { guest.Handle(run) }

func main() {}

func run(in []abi.Tensor) ([]abi.Tensor, error) {
	m, err := guest.Input(in, guest.Arg(in, "input", "sigmoid_0.tmp_0"), abi.Float32)
	if err != nil {
		return nil, err
	}
	if len(m.Shape) != 4 || m.Shape[0] != 1 || m.Shape[1] != 1 {
		return nil, fmt.Errorf("input %v: want float32 [1,1,H,W]", m)
	}
	h, w := int(m.Shape[2]), int(m.Shape[3])
	srcH, srcW := h, w
	if s, ok := abi.Find(in, "src_size"); ok {
		v, err := s.Int64s()
		if err != nil || len(v) != 2 {
			return nil, fmt.Errorf("input src_size is %v, want int64 [2] (h, w)", s)
		}
		srcH, srcW = int(v[0]), int(v[1])
	}
	spec := prepost.PaddleDB
	if spec.BoxThresh, err = guest.ArgFloat(in, "box_thresh", spec.BoxThresh); err != nil {
		return nil, err
	}
	if spec.Thresh, err = guest.ArgFloat(in, "thresh", spec.Thresh); err != nil {
		return nil, err
	}
	prob, _ := m.Float32s()
	boxes := prepost.DBBoxes(prob, w, h, srcW, srcH, spec)
	coords := make([]float32, 0, 4*len(boxes))
	scores := make([]float32, 0, len(boxes))
	for _, b := range boxes {
		coords = append(coords, float32(b.X0), float32(b.Y0), float32(b.X1), float32(b.Y1))
		scores = append(scores, float32(b.Score))
	}
	n := int64(len(boxes))
	return []abi.Tensor{abi.F32("boxes", []int64{n, 4}, coords), abi.F32("scores", []int64{n}, scores)}, nil
}
