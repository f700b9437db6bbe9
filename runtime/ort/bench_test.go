package ort

import (
	"context"
	"testing"

	onnx "github.com/yalue/onnxruntime_go"
)

// The wrapper's per-call overhead against bare onnxruntime_go on a tiny
// model (y = x + b on 1x4 floats), where overhead dominates. Compare
// BenchmarkRunBare with BenchmarkBindingRun from the same run.

func BenchmarkRunBare(b *testing.B) {
	needLib(b)
	so, _ := onnx.NewSessionOptions()
	so.SetIntraOpNumThreads(1)
	sess, err := onnx.NewDynamicAdvancedSessionWithONNXData(addModel(), []string{"x"}, []string{"y"}, so)
	so.Destroy()
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Destroy()
	x, _ := onnx.NewTensor(onnx.NewShape(1, 4), []float32{1, 2, 3, 4})
	y, _ := onnx.NewEmptyTensor[float32](onnx.NewShape(1, 4))
	defer x.Destroy()
	defer y.Destroy()
	ro, _ := onnx.NewRunOptions()
	defer ro.Destroy()
	in, out := []onnx.Value{x}, []onnx.Value{y}
	b.ReportAllocs()
	for b.Loop() {
		if err := sess.RunWithOptions(in, out, ro); err != nil {
			b.Fatal(err)
		}
	}
}

func benchBinding(b *testing.B, ctx context.Context) {
	needLib(b)
	s, err := NewSession(context.Background(), addModel(), Options{IntraOpThreads: 1, Providers: []ProviderConfig{{Name: CPU}}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	x, _ := CopyTensor([]int64{1, 4}, []float32{1, 2, 3, 4})
	y, _ := NewEmptyTensor(Float32, []int64{1, 4})
	defer x.Close()
	defer y.Close()
	bind, err := s.Bind(map[string]*Tensor{"x": x}, map[string]*Tensor{"y": y})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := bind.Run(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBindingRun(b *testing.B) { benchBinding(b, context.Background()) }

func BenchmarkBindingRunCancellable(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	benchBinding(b, ctx)
}

func BenchmarkSessionRun(b *testing.B) {
	needLib(b)
	s, err := NewSession(context.Background(), addModel(), Options{IntraOpThreads: 1, Providers: []ProviderConfig{{Name: CPU}}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	x, _ := CopyTensor([]int64{1, 4}, []float32{1, 2, 3, 4})
	defer x.Close()
	in := map[string]*Tensor{"x": x}
	b.ReportAllocs()
	for b.Loop() {
		out, err := s.Run(context.Background(), in)
		if err != nil {
			b.Fatal(err)
		}
		CloseAll(out)
	}
}
