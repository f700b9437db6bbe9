//go:build !cgo

package main

import (
	"context"
	"fmt"
	"io"
)

// A CGO_ENABLED=0 build links no ONNX Runtime (onnxruntime_go is cgo), so
// it holds the commands that need none: the fleet side (every fleet
// subcommand: keygen, publish, sign, assign, serve, rollout, rollback,
// status), the model store, bundle building
// and import, inspect, tokenize and plugins. The commands that run models
// are still listed, and say what they need instead of being unknown.
var cgoCommands = []string{"agent", "bench", "doctor", "generate", "perplexity", "quantize", "run", "serve", "update", "version"}

func init() {
	for _, name := range cgoCommands {
		register(&command{
			name:    name,
			summary: "(not in this build: it needs ONNX Runtime, which needs cgo)",
			run: func(context.Context, io.Writer, []string) error {
				return fmt.Errorf("%w: edgeinfer %s runs models through ONNX Runtime, and this binary was built with CGO_ENABLED=0: build it with cgo (a C compiler; see platforms/README.md)", errUsage, name)
			},
		})
	}
}
