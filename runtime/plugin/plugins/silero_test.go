package plugins_test

import (
	"context"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

func runSilero(tb testing.TB, s *ort.Session, x, state []float32) (float32, []float32) {
	in, err := ort.CopyTensor([]int64{1, int64(len(x))}, x)
	if err != nil {
		tb.Fatal(err)
	}
	defer in.Close()
	st, err := ort.CopyTensor([]int64{2, 1, 128}, state)
	if err != nil {
		tb.Fatal(err)
	}
	defer st.Close()
	sr, err := ort.CopyTensor([]int64{}, []int64{16000})
	if err != nil {
		tb.Fatal(err)
	}
	defer sr.Close()
	out, err := s.Run(context.Background(), map[string]*ort.Tensor{"input": in, "state": st, "sr": sr})
	if err != nil {
		tb.Fatal(err)
	}
	defer ort.CloseAll(out)
	p, _ := ort.Data[float32](out["output"])
	ns, _ := ort.Data[float32](out["stateN"])
	return p[0], append([]float32(nil), ns...)
}
