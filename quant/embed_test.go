package quant

import (
	"context"
	"math"
	"os"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// TestGatherBlockQuantizedOnORT checks that the CPU EP runs
// com.microsoft.GatherBlockQuantized with our layout (int4 and int8,
// symmetric, default zero point) and returns exactly the dequantised rows.
func TestGatherBlockQuantizedOnORT(t *testing.T) {
	if _, err := ort.FindLibrary(""); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ONNX Runtime is required under CI: %v", err)
		}
		t.Skipf("no ONNX Runtime: %v", err)
	}
	const vocab, hidden = 50, 64
	table := make([]float32, vocab*hidden)
	for i := range table {
		table[i] = float32(math.Sin(float64(i)*0.37)) * float32(1+i%7)
	}
	ids := []int64{0, 7, 49, 7, 23}
	for _, scheme := range []string{"int4-b32", "int4-b16", "int8-b32", "int8-b64"} {
		t.Run(scheme, func(t *testing.T) {
			s, err := ParseScheme(scheme)
			if err != nil {
				t.Fatal(err)
			}
			b := onnx.NewBuilder("gbq")
			in := b.Input("ids", onnx.TensorProto_INT64, onnx.Fixed(int64(len(ids))))
			y, layer, err := embedBuilder(b, s, "embed", in, table, vocab, hidden)
			if err != nil {
				t.Fatal(err)
			}
			out := b.Node("", "Identity", []string{y}, []string{"rows"})
			b.Output(out[0], onnx.TensorProto_FLOAT, onnx.Fixed(int64(len(ids))), onnx.Fixed(hidden))
			raw, err := b.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			sess, err := ort.NewSession(ctx, raw, ort.Options{IntraOpThreads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			x, err := ort.CopyTensor([]int64{int64(len(ids))}, ids)
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			res, err := sess.Run(ctx, map[string]*ort.Tensor{"ids": x})
			if err != nil {
				t.Fatal(err)
			}
			defer ort.CloseAll(res)
			got, err := ort.Data[float32](res["rows"])
			if err != nil {
				t.Fatal(err)
			}
			q, err := QuantizeBlockwise(table, vocab, hidden, s.Bits(), s.BlockSize, false)
			if err != nil {
				t.Fatal(err)
			}
			deq := q.Dequantize()
			for r, id := range ids {
				for c := 0; c < hidden; c++ {
					if w, g := deq[int(id)*hidden+c], got[r*hidden+c]; math.Abs(float64(w-g)) > 1e-6 {
						t.Fatalf("row %d (id %d) col %d: ORT %g, dequantised %g", r, id, c, g, w)
					}
				}
			}
			if layer.BytesAfter*3 > layer.BytesBefore {
				t.Fatalf("layer %+v: not smaller", layer)
			}
		})
	}
}
