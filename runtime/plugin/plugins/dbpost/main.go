// Command dbpost extracts text boxes from PaddleOCR's detector map (see
// package plugins): its arguments here, the boxes from the host's db.boxes
// primitive (runtime/plugin/primitive).
package main

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/guest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

func init() { guest.Handle(run, guest.HoldLarge()) }

func main() {}

func run(in []abi.Tensor) ([]abi.Tensor, error) {
	m, err := guest.Input(in, guest.Arg(in, "input", "sigmoid_0.tmp_0"), abi.Float32)
	if err != nil {
		return nil, err
	}
	if len(m.Shape) != 4 || m.Shape[0] != 1 || m.Shape[1] != 1 {
		return nil, fmt.Errorf("input %v: want float32 [1,1,H,W]", m)
	}
	m.Name = "map"
	req := []abi.Tensor{m}
	if s, ok := abi.Find(in, "src_size"); ok {
		req = append(req, s)
	}
	for _, a := range []struct {
		key string
		def float64
	}{{"box_thresh", prepost.PaddleDB.BoxThresh}, {"thresh", prepost.PaddleDB.Thresh}} {
		v, err := guest.ArgFloat(in, a.key, a.def)
		if err != nil {
			return nil, err
		}
		req = append(req, abi.F64(a.key, nil, []float64{v}))
	}
	return guest.Host("db.boxes", req)
}
