package quant_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/quant"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

func randMatrix(r *rand.Rand, n int) []float32 {
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	return w
}

// matmulModel writes y = x·W (+ bias through Gemm) for W [k, n] and returns
// its path. gemm builds Gemm(x, Wᵀ stored [n, k], transB=1, bias).
func matmulModel(t *testing.T, k, n int, gemm bool, w []float32) string {
	t.Helper()
	b := onnx.NewBuilder("mm")
	x := b.Input("x", onnx.TensorProto_FLOAT, onnx.Sym("B"), onnx.Fixed(int64(k)))
	var y string
	if gemm {
		bias := make([]float32, n)
		for i := range bias {
			bias[i] = float32(i) / 10
		}
		y = b.Node("", "Gemm", []string{x, b.Float32("w", []int64{int64(n), int64(k)}, w), b.Float32("bias", []int64{int64(n)}, bias)},
			[]string{"y"}, onnx.AttrInt("transB", 1))[0]
	} else {
		y = b.Node("", "MatMul", []string{x, b.Float32("w", []int64{int64(k), int64(n)}, w)}, []string{"y"})[0]
	}
	b.Output(y, onnx.TensorProto_FLOAT, onnx.Sym("B"), onnx.Fixed(int64(n)))
	raw, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mm.onnx")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func runModel(t *testing.T, path string, x []float32, rows, k int) []float32 {
	t.Helper()
	s, err := ort.NewSessionFromFile(context.Background(), path, ort.Options{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in, err := ort.CopyTensor([]int64{int64(rows), int64(k)}, x)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := s.Run(context.Background(), map[string]*ort.Tensor{"x": in})
	if err != nil {
		t.Fatal(err)
	}
	defer ort.CloseAll(out)
	y, err := ort.Data[float32](out["y"])
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), y...)
}

// TestGraphPassMatchesDequantised runs the rewritten graph on ONNX Runtime
// (accuracy level 1: fp32 compute) and compares it with x·dequant(W)
// computed in Go, for MatMul and Gemm, int4 and int8, symmetric and with
// zero points, and a K (40) that ends in a partial block.
func TestGraphPassMatchesDequantised(t *testing.T) {
	orttest.Need(t)
	const k, n, rows = 40, 24, 3
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		scheme string
		gemm   bool
	}{
		{"int4-b32-acc1", false}, {"int4-b16-asym-acc1", false}, {"int8-b32-acc1", true}, {"int8-b16-asym-acc1", false}, {"int4-b32-acc1", true},
	} {
		t.Run(tc.scheme, func(t *testing.T) {
			w := randMatrix(r, k*n)
			path := matmulModel(t, k, n, tc.gemm, w)
			sc, err := quant.ParseScheme(tc.scheme)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "q.onnx")
			res, err := quant.QuantizeFile(context.Background(), path, out, quant.Options{Scheme: sc})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Layers) != 1 || res.Layers[0].RelRMS <= 0 || res.Layers[0].RelRMS > 0.2 {
				t.Fatalf("layers %+v", res.Layers)
			}
			nk := w // Gemm transB: already [n, k]
			if !tc.gemm {
				nk = make([]float32, k*n)
				for i := 0; i < k; i++ {
					for j := 0; j < n; j++ {
						nk[j*k+i] = w[i*n+j]
					}
				}
			}
			q, err := quant.QuantizeBlockwise(nk, n, k, sc.Bits(), sc.BlockSize, sc.Asymmetric)
			if err != nil {
				t.Fatal(err)
			}
			dq := q.Dequantize()
			x := randMatrix(r, rows*k)
			got := runModel(t, out, x, rows, k)
			for i := 0; i < rows; i++ {
				for j := 0; j < n; j++ {
					var want float64
					for c := 0; c < k; c++ {
						want += float64(x[i*k+c]) * float64(dq[j*k+c])
					}
					if tc.gemm {
						want += float64(j) / 10
					}
					if d := math.Abs(float64(got[i*n+j]) - want); d > 1e-3 {
						t.Fatalf("y[%d,%d] = %v, want %v", i, j, got[i*n+j], want)
					}
				}
			}
		})
	}
}

// TestGraphPassFP16 checks the fp16 rewrite runs and stays within fp16
// rounding of the fp32 output.
func TestGraphPassFP16(t *testing.T) {
	orttest.Need(t)
	const k, n = 64, 32
	r := rand.New(rand.NewPCG(3, 4))
	w := randMatrix(r, k*n)
	path := matmulModel(t, k, n, false, w)
	out := filepath.Join(t.TempDir(), "h.onnx")
	if _, err := quant.QuantizeFile(context.Background(), path, out, quant.Options{Scheme: quant.Scheme{Format: quant.FormatFP16}}); err != nil {
		t.Fatal(err)
	}
	x := randMatrix(r, k)
	ref, got := runModel(t, path, x, 1, k), runModel(t, out, x, 1, k)
	if e := quant.RelativeRMS(ref, got); e > 1e-3 {
		t.Fatalf("fp16 relative error %v", e)
	}
}

// TestGraphPassBadInput covers the refusals: nothing to quantise, a weight
// of another dtype, K not divisible by the block size without padding, and
// keeping every weight.
func TestGraphPassBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, build func(b *onnx.Builder)) string {
		b := onnx.NewBuilder(name)
		build(b)
		raw, err := b.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name+".onnx")
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noWeights := write("add", func(b *onnx.Builder) {
		x := b.Input("x", onnx.TensorProto_FLOAT, onnx.Fixed(4))
		b.Output(b.Node("", "Add", []string{x, x}, []string{"y"})[0], onnx.TensorProto_FLOAT, onnx.Fixed(4))
	})
	fp16 := write("half", func(b *onnx.Builder) {
		x := b.Input("x", onnx.TensorProto_FLOAT16, onnx.Fixed(1), onnx.Fixed(32))
		w := b.Float16("w", []int64{32, 8}, make([]uint16, 256))
		b.Output(b.Node("", "MatMul", []string{x, w}, []string{"y"})[0], onnx.TensorProto_FLOAT16, onnx.Fixed(1), onnx.Fixed(8))
	})
	r := rand.New(rand.NewPCG(5, 6))
	oddK := matmulModel(t, 40, 8, false, randMatrix(r, 320))
	int4 := func(pad bool) quant.Scheme {
		return quant.Scheme{Format: quant.FormatInt4, BlockSize: 32, PadK: pad}
	}
	for _, tc := range []struct {
		name string
		in   string
		opts quant.Options
		want error
	}{
		{"no weights", noWeights, quant.Options{Scheme: int4(true)}, quant.ErrNothingToQuantize},
		{"fp16 weight", fp16, quant.Options{Scheme: int4(true)}, quant.ErrDType},
		{"K=40 block 32 unpadded", oddK, quant.Options{Scheme: int4(false)}, quant.ErrBlockSize},
		{"all kept", oddK, quant.Options{Scheme: int4(true), Keep: []string{"w"}}, quant.ErrNothingToQuantize},
		{"bad scheme", oddK, quant.Options{Scheme: quant.Scheme{Format: quant.FormatInt4, BlockSize: 24}}, quant.ErrScheme},
		{"not onnx", filepath.Join(dir, "missing.onnx"), quant.Options{Scheme: int4(true)}, os.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.onnx")
			_, err := quant.QuantizeFile(context.Background(), tc.in, out, tc.opts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if _, serr := os.Stat(out); serr == nil {
				t.Errorf("%s written despite the error", out)
			}
		})
	}
}
