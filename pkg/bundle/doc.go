// Package bundle defines edgeinfer's model bundle: a directory holding the
// ONNX model (model.onnx, with model.onnx.data for large weights), an
// optional tokenizer.json, and the manifest edgeinfer.json that names the
// model, its kind and decoder contract, its KV geometry, generation
// defaults, weight format, and the sha256 and size of every file.
//
// Load reads a bundle and verifies every file against the manifest;
// Write seals a directory by hashing its files into a manifest. The
// builders of the offline side (graphs, Hugging Face imports) are in
// pkg/bundle/build, so that a device links only this reader.
package bundle
