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
// contributes exactly 0).
//
// This package does not import the runtime: model runs for calibration and
// quality reports go through interfaces the CLI fills (see Runner).
package quant
