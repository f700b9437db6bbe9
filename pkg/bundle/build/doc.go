// Package build makes model bundles on the offline side: decoder bundles
// from a Llama-family configuration and weights (BuildDecoder), from a
// Hugging Face checkpoint (ImportHF), and from a directory holding an ONNX
// decoder exported by Hugging Face Optimum or the onnxruntime-genai builder
// (Recognise, ImportExported), identified by its input and output names (and
// genai_config.json when present), so it runs through the compatible
// contract.
//
// It is apart from package bundle, the reader a device links, because it
// links the ONNX protobuf types and the graph builder (pkg/onnx,
// pkg/onnx/llama); the engine must not.
package build
