// Package ort is edgeinfer's binding to ONNX Runtime, and the only package
// of the module that imports github.com/yalue/onnxruntime_go (cgo).
//
// It finds the shared library (an explicit path, $ONNXRUNTIME_LIB, the
// per-user cache filled by `make setup`, then system paths) and says so
// plainly when the file is missing, a directory, or built for another CPU
// architecture; keeps one reference-counted process-wide environment
// (Acquire, Release, Version); loads sessions from bytes or files over an
// ordered execution-provider chain (TensorRT, CUDA, OpenVINO, QNN, CoreML,
// XNNPACK, DirectML, CPU), recording why each skipped provider was skipped;
// and runs them with context cancellation that terminates the native run.
//
// Tensor memory is always safe for ONNX Runtime to keep: off-heap Buffers
// (anonymous mmap) or Go slices pinned for the tensor's life. Inputs are
// checked against the model's declared names, element types and shapes
// before a run. For a hot loop, a Binding validates its tensors once and
// each Run then only calls into ONNX Runtime.
//
// Every session also gets edgeinfer's own operators (OpDomain,
// "ai.edgeinfer"), C kernels with per-instruction-set variants picked at
// load (ops.c binds them): PagedAttention, attention over the paged KV cache
// read in place through the block table (paged_attention.c), which the
// SDK's paged decoder graphs use in its fused form, which also splits the
// stacked q/k/v projection and applies the rotary embedding (rotary_qkv.c;
// RotaryQKV is that step as a node of its own, for older bundles); and MatMulNBits,
// com.microsoft.MatMulNBits' contract for int4 and int8 block-32 weights
// with integer dot products (matmul_q4.c), which graphs built with
// pkg/onnx/llama use unless built with Options.PortableMatMul; and
// GatherBlockQuantized, the quantised embedding (gather_blocks.c).
// SetKernelTiming and KernelTimes say how long each of them ran, in every
// session of the process, without ONNX Runtime's profiler, and
// ProductThreads how much of the matrix products' parallel part the
// threads worked rather than waited for each other.
//
// Usage:
//
//	s, err := ort.NewSessionFromFile(ctx, "model.onnx", ort.Options{IntraOpThreads: 2})
//	if err != nil { ... }
//	defer s.Close()
//	fmt.Println(s.Provider(), s.ProviderAttempts()) // CPU [TensorRT: provider library not found ...]
//	x, _ := ort.CopyTensor([]int64{1, 4}, []float32{1, 2, 3, 4})
//	defer x.Close()
//	out, err := s.Run(ctx, map[string]*ort.Tensor{"x": x})
//	if err != nil { ... }
//	defer ort.CloseAll(out)
//	y, _ := ort.Data[float32](out["y"])
//
// Concurrency: Session, Tensor.Close and Buffer.Close are safe for
// concurrent use; a Binding is not (one per goroutine). Session.Close
// terminates runs in flight and waits for them before freeing anything.
package ort
