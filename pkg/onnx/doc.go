// Package onnx holds the ONNX protobuf types, a small graph builder and a
// model inspector.
//
// The types in onnx.pb.go are generated from Debian's libonnx-dev
// /usr/include/onnx/onnx.proto (ONNX 1.12, proto2) and committed, so that a
// build needs neither protoc nor protoc-gen-go. To regenerate:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	cp /usr/include/onnx/onnx.proto /tmp/gen/ && cd /tmp/gen
//	protoc --go_out=. --go_opt=paths=source_relative \
//	    --go_opt=Monnx.proto=github.com/edgeinfer/edgeinfer/pkg/onnx onnx.proto
//	cp onnx.pb.go $REPO/pkg/onnx/
//
// Builder assembles a model node by node; initializers are taken from Go
// slices without copying them, and those above a size threshold can be
// streamed to an external data file as they are added, so a multi-gigabyte
// model never sits in memory at once. Inspect summarises model bytes:
// parameters and bytes per initializer, operator histogram, graph inputs and
// outputs, opset imports.
//
// A new Builder writes IR version 8 and opset 17 (DefaultIRVersion,
// DefaultOpset): ONNX Runtime 1.30 loads such models together with the
// com.microsoft domain at opset 1 and the ai.edgeinfer domain of
// runtime/ort's kernels, as every graph pkg/onnx/llama builds does in its
// tests.
package onnx
