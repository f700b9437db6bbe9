package primitive

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

func TestUnknown(t *testing.T) {
	_, err := Run(context.Background(), "fs.read", nil, Limits{})
	if !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "image.prepare") {
		t.Fatalf("error %v, want ErrUnknown listing the primitives", err)
	}
}

// TestImagePrepareEqualsNative: the primitive is prepost's decode, crop
// and preprocess, bit for bit.
func TestImagePrepareEqualsNative(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 90, 70))
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range img.Pix {
		img.Pix[i] = byte(rng.IntN(256))
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	spec := prepost.PaddleDet
	spec.LimitSide = 64
	out, err := Run(context.Background(), "image.prepare", []abi.Tensor{
		abi.Bytes("image", buf.Bytes()), abi.I64("crop", []int64{4}, []int64{5, 6, 70, 50}),
		abi.I64("limit_side", nil, []int64{64}), abi.I64("nchw", nil, []int64{1}),
		abi.F64("mean", []int64{3}, spec.Mean[:]), abi.F64("std", []int64{3}, spec.Std[:]),
	}, Limits{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	dec, _ := prepost.DecodeImage(buf.Bytes())
	sub, _ := prepost.Crop(dec, image.Rect(5, 6, 75, 56))
	want, w, h := prepost.Preprocess(sub, spec)
	px, _ := abi.Find(out, "pixels")
	got, _ := px.Float32s()
	if !slices.Equal(got, want) || !slices.Equal(px.Shape, []int64{1, 3, int64(h), int64(w)}) {
		t.Fatalf("pixels %v differ from native [1 3 %d %d]", px, h, w)
	}
	size, _ := abi.Find(out, "src_size")
	if v, _ := size.Int64s(); !slices.Equal(v, []int64{50, 70}) {
		t.Errorf("src_size %v, want [50 70] (the crop)", v)
	}
}

// TestImageOverCap: the pixel count and the output's size are checked
// from the header, against the memory cap, before anything is decoded.
func TestImageOverCap(t *testing.T) {
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, 1000, 1000))); err != nil {
		t.Fatal(err)
	}
	in := []abi.Tensor{abi.Bytes("image", buf.Bytes()), abi.I64("width", nil, []int64{8}), abi.I64("height", nil, []int64{8})}
	_, err := Run(context.Background(), "image.prepare", in, Limits{MaxBytes: 1 << 20})
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "1000x1000") {
		t.Fatalf("error %v, want ErrLimit naming the size", err)
	}
	if _, err := Run(context.Background(), "image.prepare", in, Limits{MaxBytes: 8 << 20}); err != nil {
		t.Fatalf("under an 8 MiB cap: %v", err)
	}
	// The output too: a 2000x2000 float32 input (48 MB) of a small image.
	big := []abi.Tensor{abi.Bytes("image", buf.Bytes()), abi.I64("width", nil, []int64{2000}), abi.I64("height", nil, []int64{2000})}
	if _, err := Run(context.Background(), "image.prepare", big, Limits{MaxBytes: 8 << 20}); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "2000x2000") {
		t.Fatalf("an output over the cap: %v, want ErrLimit naming its size", err)
	}
}

// TestNMSStopsAtDeadline: quadratic work on hostile input ends with the
// context (done in full this input takes minutes).
func TestNMSStopsAtDeadline(t *testing.T) {
	const n = 100000
	flat := make([]float32, 0, 5*n)
	for i := range n {
		x, y := float32(i%400)/400, float32(i/400)/400
		flat = append(flat, 0.5, x, y, x+0.001, y+0.001)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, "nms.weighted", []abi.Tensor{abi.F32("candidates", []int64{n, 5}, flat)}, Limits{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the deadline", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("stopped after %v", took)
	}
}

func TestNMSEqualsNative(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var flat []float32
	var cands []prepost.Face
	for i := range 300 {
		cx, cy := float32(i%12)/12, float32(i%7)/7
		f := [5]float32{rng.Float32(), cx, cy, cx + 0.1 + rng.Float32()*0.01, cy + 0.1}
		flat = append(flat, f[:]...)
		cands = append(cands, prepost.Face{Score: float64(f[0]), XMin: float64(f[1]), YMin: float64(f[2]), XMax: float64(f[3]), YMax: float64(f[4])})
	}
	out, err := Run(context.Background(), "nms.weighted", []abi.Tensor{abi.F32("candidates", []int64{300, 5}, flat), abi.F64("iou", nil, []float64{0.4})}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var want []float32
	for _, f := range prepost.WeightedNMS(cands, 0.4) {
		want = append(want, float32(f.Score), float32(f.XMin), float32(f.YMin), float32(f.XMax), float32(f.YMax))
	}
	faces, _ := abi.Find(out, "faces")
	if got, _ := faces.Float32s(); !slices.Equal(got, want) {
		t.Fatalf("faces %v, native %v", got, want)
	}
}

func TestArgmaxRowsEqualsCTC(t *testing.T) {
	const T, C = 20, 50
	rng := rand.New(rand.NewPCG(5, 6))
	probs := make([]float32, T*C)
	for i := range probs {
		probs[i] = float32(rng.IntN(8)) // ties: the first index wins
	}
	out, err := Run(context.Background(), "argmax.rows", []abi.Tensor{abi.F32("x", []int64{1, T, C}, probs)}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := abi.Find(out, "index")
	val, _ := abi.Find(out, "value")
	iv, _ := idx.Int32s()
	vv, _ := val.Float32s()
	cs := make([]string, C)
	for i := range cs {
		cs[i] = string(rune('A' + i))
	}
	got, want := prepost.CTCCollapse(iv, vv, cs), prepost.CTCGreedy(probs, T, C, cs)
	if got.Text != want.Text || got.Score != want.Score || !slices.Equal(got.Indices, want.Indices) {
		t.Fatalf("collapse of argmax.rows %+v, CTCGreedy %+v", got, want)
	}
}

func TestDBBoxesOverCap(t *testing.T) {
	m := abi.F32("map", []int64{1, 1, 512, 512}, make([]float32, 512*512))
	if _, err := Run(context.Background(), "db.boxes", []abi.Tensor{m}, Limits{MaxBytes: 1 << 20}); !errors.Is(err, ErrLimit) {
		t.Fatalf("error %v, want ErrLimit", err)
	}
}

// FuzzRun: whatever tensors a plugin passes, a primitive returns an error
// or tensors that encode, and never panics.
func FuzzRun(f *testing.F) {
	var buf bytes.Buffer
	_ = png.Encode(&buf, image.NewGray(image.Rect(0, 0, 3, 2)))
	seeds := [][]abi.Tensor{
		{abi.Bytes("image", buf.Bytes()), abi.I64("width", nil, []int64{4}), abi.I64("height", nil, []int64{4})},
		{abi.Bytes("rgb", make([]byte, 12)), abi.I64("limit_side", nil, []int64{32})},
		{abi.F32("candidates", []int64{2, 5}, []float32{1, 0, 0, 1, 1, 0.5, 0, 0, 0.5, 0.5})},
		{abi.F32("x", []int64{2, 3}, []float32{1, 2, 3, 3, 2, 1})},
		{abi.F32("map", []int64{4, 4}, []float32{0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1}), abi.I64("src_size", []int64{2}, []int64{8, 8})},
	}
	for i, s := range seeds {
		f.Add(uint8(i), abi.Encode(nil, s))
	}
	names := Names()
	f.Fuzz(func(t *testing.T, which uint8, req []byte) {
		in, err := abi.Decode(req)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		out, err := Run(ctx, names[int(which)%len(names)], in, Limits{MaxBytes: 16 << 20})
		if err == nil {
			if err := abi.Validate(out); err != nil {
				t.Fatalf("output does not encode: %v", err)
			}
		}
	})
}
