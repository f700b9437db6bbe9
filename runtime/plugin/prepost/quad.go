package prepost

import (
	"image"
	"math"
	"sort"
)

// Quad is a rotated rectangle: its corners top-left, top-right,
// bottom-right, bottom-left, where "right" runs along the rectangle's
// longer side (a text line's direction) and "top" is the side with the
// smaller y.
type Quad [4][2]float64

// Size is the quad's width (top edge) and height (left edge).
func (q Quad) Size() (w, h float64) {
	return math.Hypot(q[1][0]-q[0][0], q[1][1]-q[0][1]), math.Hypot(q[3][0]-q[0][0], q[3][1]-q[0][1])
}

// Bounds is the smallest pixel rectangle that holds q.
func (q Quad) Bounds() image.Rectangle {
	x0, y0, x1, y1 := math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
	for _, p := range q {
		x0, y0 = min(x0, p[0]), min(y0, p[1])
		x1, y1 = max(x1, p[0]), max(y1, p[1])
	}
	return image.Rect(int(math.Floor(x0)), int(math.Floor(y0)), int(math.Ceil(x1)), int(math.Ceil(y1)))
}

// minAreaRect is the rotated rectangle of least area around pts (the
// rotating-calipers rule: one side lies on an edge of the convex hull),
// as PaddleOCR's cv2.minAreaRect. It returns the centre, the unit vector
// of the longer side, and the side lengths along it and across it.
func minAreaRect(pts [][2]float64) (c, u [2]float64, long, short float64) {
	hull := convexHull(pts)
	if len(hull) == 1 {
		return hull[0], [2]float64{1, 0}, 0, 0
	}
	best := math.Inf(1)
	for i := range hull {
		a, b := hull[i], hull[(i+1)%len(hull)]
		dx, dy := b[0]-a[0], b[1]-a[1]
		l := math.Hypot(dx, dy)
		if l == 0 {
			continue
		}
		ex := [2]float64{dx / l, dy / l}
		ey := [2]float64{-ex[1], ex[0]}
		u0, u1, v0, v1 := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
		for _, p := range hull {
			pu := p[0]*ex[0] + p[1]*ex[1]
			pv := p[0]*ey[0] + p[1]*ey[1]
			u0, u1, v0, v1 = min(u0, pu), max(u1, pu), min(v0, pv), max(v1, pv)
		}
		if area := (u1 - u0) * (v1 - v0); area < best {
			best = area
			cu, cv := (u0+u1)/2, (v0+v1)/2
			c = [2]float64{cu*ex[0] + cv*ey[0], cu*ex[1] + cv*ey[1]}
			if u1-u0 >= v1-v0 {
				u, long, short = ex, u1-u0, v1-v0
			} else {
				u, long, short = ey, v1-v0, u1-u0
			}
		}
	}
	// Text runs left to right: the long side's direction points right.
	if u[0] < 0 || u[0] == 0 && u[1] < 0 {
		u = [2]float64{-u[0], -u[1]}
	}
	return c, u, long, short
}

// quadOf is the rectangle of centre c, long-side direction u and sides
// long x short, its corners ordered as Quad says.
func quadOf(c, u [2]float64, long, short float64) Quad {
	n := [2]float64{-u[1], u[0]} // u turned a right angle: down when u points right
	if n[1] < 0 {
		n = [2]float64{-n[0], -n[1]}
	}
	at := func(su, sn float64) [2]float64 {
		return [2]float64{c[0] + su*long/2*u[0] + sn*short/2*n[0], c[1] + su*long/2*u[1] + sn*short/2*n[1]}
	}
	return Quad{at(-1, -1), at(1, -1), at(1, 1), at(-1, 1)}
}

// convexHull is Andrew's monotone chain, counter-clockwise, without
// collinear points.
func convexHull(pts [][2]float64) [][2]float64 {
	p := append([][2]float64(nil), pts...)
	sort.Slice(p, func(i, j int) bool { return p[i][0] < p[j][0] || p[i][0] == p[j][0] && p[i][1] < p[j][1] })
	if len(p) < 3 {
		return p
	}
	cross := func(o, a, b [2]float64) float64 {
		return (a[0]-o[0])*(b[1]-o[1]) - (a[1]-o[1])*(b[0]-o[0])
	}
	h := make([][2]float64, 0, 2*len(p))
	for _, q := range p {
		for len(h) >= 2 && cross(h[len(h)-2], h[len(h)-1], q) <= 0 {
			h = h[:len(h)-1]
		}
		h = append(h, q)
	}
	lower := len(h) + 1
	for i := len(p) - 2; i >= 0; i-- {
		for len(h) >= lower && cross(h[len(h)-2], h[len(h)-1], p[i]) <= 0 {
			h = h[:len(h)-1]
		}
		h = append(h, p[i])
	}
	return h[:len(h)-1]
}

// PreprocessQuad is Preprocess on the part of img inside q, turned
// upright: output pixel (x, y) samples the point a fraction (x+0.5)/W
// along the top edge and (y+0.5)/H down the left edge (bilinear, clamped
// at the image's edges). The spec must give Width and Height. For an
// axis-aligned q it samples as Preprocess does the crop (which clamps at
// the crop's edges instead).
func PreprocessQuad(img image.Image, q Quad, s ImageSpec) []float32 {
	b := img.Bounds()
	ow, oh := s.Width, s.Height
	dst := make([]float32, 3*ow*oh)
	src := newSampler(img)
	scale, shift := s.normaliser()
	// q in the image's own coordinates (the sampler adds Bounds.Min).
	ox, oy := q[0][0]-float64(b.Min.X), q[0][1]-float64(b.Min.Y)
	ux, uy := (q[1][0]-q[0][0])/float64(ow), (q[1][1]-q[0][1])/float64(ow)
	vx, vy := (q[3][0]-q[0][0])/float64(oh), (q[3][1]-q[0][1])/float64(oh)
	plane := ow * oh
	for y := range oh {
		for x := range ow {
			fx := ox + (float64(x)+0.5)*ux + (float64(y)+0.5)*vx - 0.5
			fy := oy + (float64(x)+0.5)*uy + (float64(y)+0.5)*vy - 0.5
			x0, y0 := int(math.Floor(fx)), int(math.Floor(fy))
			wx, wy := fx-float64(x0), fy-float64(y0)
			cx0, cx1 := min(max(x0, 0), b.Dx()-1), min(max(x0+1, 0), b.Dx()-1)
			cy0, cy1 := min(max(y0, 0), b.Dy()-1), min(max(y0+1, 0), b.Dy()-1)
			p00, p10, p01, p11 := src.at(cx0, cy0), src.at(cx1, cy0), src.at(cx0, cy1), src.at(cx1, cy1)
			for ch := range 3 {
				v := (p00[ch]*(1-wx)+p10[ch]*wx)*(1-wy) + (p01[ch]*(1-wx)+p11[ch]*wx)*wy
				s.put(dst, plane, y*ow+x, ch, (v-shift[ch])*scale[ch])
			}
		}
	}
	return dst
}
