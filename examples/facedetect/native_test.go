package main

// The Go pre- and post-processing this example ran before it moved into
// plugins, kept as the reference the plugins must equal (TestPluginsMatchNative)
// and the baseline of BenchmarkPrePost.

import (
	"image"
	"math"
	"sort"
)

const size = 128

func nativePreprocess(img image.Image, dst []float32) {
	bnd := img.Bounds()
	sx := float64(bnd.Dx()) / size
	sy := float64(bnd.Dy()) / size
	at := func(x, y int) [3]float64 {
		x = min(max(x, 0), bnd.Dx()-1)
		y = min(max(y, 0), bnd.Dy()-1)
		r, g, b, _ := img.At(bnd.Min.X+x, bnd.Min.Y+y).RGBA()
		return [3]float64{float64(r) / 65535, float64(g) / 65535, float64(b) / 65535}
	}
	for y := range size {
		fy := (float64(y)+0.5)*sy - 0.5
		y0 := int(math.Floor(fy))
		wy := fy - float64(y0)
		for x := range size {
			fx := (float64(x)+0.5)*sx - 0.5
			x0 := int(math.Floor(fx))
			wx := fx - float64(x0)
			p00, p10, p01, p11 := at(x0, y0), at(x0+1, y0), at(x0, y0+1), at(x0+1, y0+1)
			for c := range 3 {
				v := (p00[c]*(1-wx)+p10[c]*wx)*(1-wy) + (p01[c]*(1-wx)+p11[c]*wx)*wy
				dst[(y*size+x)*3+c] = float32(v*2 - 1)
			}
		}
	}
}

func nativeAnchors() [][2]float64 {
	var out [][2]float64
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

func nativeDecode(scores, boxes []float32, threshold float64) []Face {
	anchors := nativeAnchors()
	var cands []Face
	for i, a := range anchors {
		if i >= len(scores) || 16*i+3 >= len(boxes) {
			break
		}
		s := 1 / (1 + math.Exp(-math.Max(-100, math.Min(100, float64(scores[i])))))
		if s < threshold {
			continue
		}
		r := boxes[16*i:]
		cx := float64(r[0])/size + a[0]
		cy := float64(r[1])/size + a[1]
		w, h := float64(r[2])/size, float64(r[3])/size
		cands = append(cands, Face{Score: s, XMin: cx - w/2, YMin: cy - h/2, XMax: cx + w/2, YMax: cy + h/2})
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].Score > cands[j].Score })
	var faces []Face
	used := make([]bool, len(cands))
	for i := range cands {
		if used[i] {
			continue
		}
		var sum, xmin, ymin, xmax, ymax float64
		for j := i; j < len(cands); j++ {
			if used[j] || iou(cands[i], cands[j]) < 0.3 {
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
	return faces
}

func iou(a, b Face) float64 {
	ix := math.Max(0, math.Min(a.XMax, b.XMax)-math.Max(a.XMin, b.XMin))
	iy := math.Max(0, math.Min(a.YMax, b.YMax)-math.Max(a.YMin, b.YMin))
	inter := ix * iy
	union := (a.XMax-a.XMin)*(a.YMax-a.YMin) + (b.XMax-b.XMin)*(b.YMax-b.YMin) - inter
	if union <= 0 {
		return 0
	}
	return inter / union
}
