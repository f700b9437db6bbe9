// Package plugins holds no code: its subdirectories are the SDK's plugins,
// each a main package built to WebAssembly by `make plugins`
// (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared) into
// build/plugins/<name>.wasm, wrapping runtime/plugin/prepost behind the
// plugin ABI; the vision plugins hand their heavy loops to the host's
// primitives (runtime/plugin/primitive). c/<name> are plugins in C (the
// kit in runtime/plugin/guest/c), built as <name>-c.wasm where clang,
// lld and wasi-libc are installed. The tests here run each plugin on real
// models' inputs and outputs and compare it with the same code run
// natively; the benchmarks time each against native Go.
//
//   - imageprep: JPEG/PNG (input "image") or raw RGB ("rgb" [H,W,3]) to a
//     normalised float tensor; arg.spec blazeface | paddle-det, arg.output
//     the tensor's name, optional input "crop" [x,y,w,h]; also outputs
//     src_size [h, w]
//   - blazeface: BlazeFace scores and regressors (or "candidates" [N,5]) to
//     "faces" [N,5] (score, xmin, ymin, xmax, ymax), weighted NMS
//   - dbpost: PaddleOCR detector map [1,1,H,W] + src_size to "boxes" [N,4],
//     "scores" [N] and the rotated boxes "quads" [N,4,2]
//   - ctc: recogniser probabilities [1,T,C] to "text", "score", "indices";
//     the dictionary from input "dict" or the file arg.dict (a granted
//     read-only directory)
//   - vad: Silero speech probabilities "probs" [N] to "segments" [K,2]
//   - redact: a decoder's pre plugin: "prompt" with e-mail addresses,
//     card-like digit runs and phone numbers masked, and "redacted" [1]
//     (how many)
//   - jsonout: a decoder's post plugin: the first complete JSON object or
//     array in "text" as "json" (compacted; "" when none) and "found" [1];
//     the pre plugin's outputs pass through
//   - empty: returns nothing (measures the per-call overhead)
//   - c/blazeface (blazeface-c.wasm): the blazeface plugin in C
package plugins
