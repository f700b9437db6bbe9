// Package quant quantises the weights of ONNX graphs for edge devices.
//
// Weight-only schemes (ParseScheme: "int4-b32", "int4-b64", "int4-b128",
// "int8", "fp16", with "-asym" and "-accN" suffixes) turn constant MatMul and
// Gemm weights into com.microsoft.MatMulNBits (bits 4 or 8, blocks along K,
// symmetric or with zero points) or float16. Two ways in, one quantiser:
//
//   - Emitter is a llama.WeightEmitter: the decoder builder hands it one
//     weight at a time, so a large model is quantised while it is built and
//     never held as fp32 whole.
//   - QuantizeModel is a graph pass over any ONNX model (external data
//     included): it streams each constant weight from the source data file
//     to the destination one.
//
// Both record a per-weight table (Layer): bytes before and after and the
// relative RMS reconstruction error.
//
// Verified on the CPU EP of ONNX Runtime 1.30 (tests in ort_test.go):
// MatMulNBits runs bits=4 and bits=8, with and without zero points, and with
// a partial last block (K not a multiple of the block size: B is
// [N, ceil(K/bs), bs·bits/8], the tail padded with the zero point, so it
// contributes exactly 0). Its layout, for bits=4 and block size 32: B is
// uint8 [N, K/32, 16] with the even element of each pair in the low
// nibble, scales float32 [N, K/32], and without zero points the kernel's
// default zero point is 8 (2^(bits-1) in general). accuracy_level=4
// quantises the activations to int8 (logits then differ from fp32 by
// about 1e-2; compare graphs at level 1 or in fp32).
//
// This package does not import the runtime: model runs for calibration and
// quality reports go through interfaces the CLI fills (see Runner).
package quant
