// Package prepost holds the pre- and post-processing that ships in plugins:
// image decode, resize and normalise; BlazeFace anchor decoding and
// weighted non-maximum suppression; PaddleOCR DB text-box extraction and
// CTC decoding; Silero VAD smoothing into speech segments. It is plain Go
// with no dependencies beyond the standard library, so the same code
// compiles to WebAssembly (runtime/plugin/plugins/*, built with GOOS=wasip1)
// and natively (the benchmarks compare the two, and applications without
// plugins can call it directly).
//
// All functions are pure and safe for concurrent use.
package prepost
