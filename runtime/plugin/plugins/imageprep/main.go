// Command imageprep decodes, resizes and normalises an image for a vision
// model (see package plugins). It picks the spec and names the output; the
// pixels are the host's image.prepare primitive (runtime/plugin/primitive).
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
	var spec prepost.ImageSpec
	switch s := guest.Arg(in, "spec", "blazeface"); s {
	case "blazeface":
		spec = prepost.BlazeFace
	case "paddle-det":
		spec = prepost.PaddleDet
	default:
		return nil, fmt.Errorf("argument spec=%q: want blazeface or paddle-det", s)
	}
	nchw := int64(0)
	if spec.NCHW {
		nchw = 1
	}
	req := []abi.Tensor{
		abi.I64("width", nil, []int64{int64(spec.Width)}),
		abi.I64("height", nil, []int64{int64(spec.Height)}),
		abi.I64("limit_side", nil, []int64{int64(spec.LimitSide)}),
		abi.I64("nchw", nil, []int64{nchw}),
		abi.F64("mean", []int64{3}, spec.Mean[:]),
		abi.F64("std", []int64{3}, spec.Std[:]),
	}
	if t, ok := abi.Find(in, "rgb"); ok {
		req = append(req, t)
	} else {
		t, err := guest.Input(in, "image", abi.Uint8)
		if err != nil {
			return nil, err
		}
		req = append(req, t)
	}
	if c, ok := abi.Find(in, "crop"); ok { // x, y, w, h in pixels
		req = append(req, c)
	}
	out, err := guest.Host("image.prepare", req)
	if err != nil {
		return nil, err
	}
	px, _ := abi.Find(out, "pixels")
	px.Name = guest.Arg(in, "output", "input")
	size, _ := abi.Find(out, "src_size")
	return []abi.Tensor{px, size}, nil
}
