// Command imageprep decodes, resizes and normalises an image for a vision
// model (see package plugins).
package main

import (
	"fmt"
	"image"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/guest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

func init() { guest.Handle(run) }

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
	var img image.Image
	var err error
	if t, ok := abi.Find(in, "rgb"); ok {
		if t.DType != abi.Uint8 || len(t.Shape) != 3 || t.Shape[2] != 3 {
			return nil, fmt.Errorf("input rgb is %v, want uint8 [H,W,3]", t)
		}
		img, err = prepost.RGB(t.Data, int(t.Shape[1]), int(t.Shape[0]))
	} else {
		t, ierr := guest.Input(in, "image", abi.Uint8)
		if ierr != nil {
			return nil, ierr
		}
		img, err = prepost.DecodeImage(t.Data)
	}
	if err != nil {
		return nil, err
	}
	if c, ok := abi.Find(in, "crop"); ok { // x, y, w, h in pixels
		v, err := c.Int64s()
		if err != nil || len(v) != 4 {
			return nil, fmt.Errorf("input crop is %v, want int64 [4] (x, y, w, h)", c)
		}
		if img, err = prepost.Crop(img, image.Rect(int(v[0]), int(v[1]), int(v[0]+v[2]), int(v[1]+v[3]))); err != nil {
			return nil, err
		}
	}
	data, w, h := prepost.Preprocess(img, spec)
	shape := []int64{1, int64(h), int64(w), 3}
	if spec.NCHW {
		shape = []int64{1, 3, int64(h), int64(w)}
	}
	b := img.Bounds()
	return []abi.Tensor{
		abi.F32(guest.Arg(in, "output", "input"), shape, data),
		abi.I64("src_size", []int64{2}, []int64{int64(b.Dy()), int64(b.Dx())}),
	}, nil
}
