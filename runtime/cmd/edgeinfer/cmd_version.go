//go:build cgo

package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

func init() {
	register(&command{
		name:    "version",
		summary: "print the SDK version, its commit and the ONNX Runtime library found (also --version)",
		run:     runVersion,
	})
}

// modulePath is the SDK's module; a program that imports it as a
// dependency reports the dependency's version.
const modulePath = "github.com/edgeinfer/edgeinfer"

func runVersion(_ context.Context, w io.Writer, args []string) error {
	fs := newFlagSet("version")
	lib := fs.String("lib", "", "ONNX Runtime library to check (default: $ONNXRUNTIME_LIB, then the `make setup` cache, then system paths)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: version takes no arguments", errUsage)
	}
	bi, _ := debug.ReadBuildInfo()
	sdk, commit := buildVersion(bi)
	fmt.Fprintf(w, "edgeinfer %s\ncommit: %s\ngo: %s %s/%s\nonnx runtime: %s\n",
		sdk, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH, onnxRuntime(*lib))
	return nil
}

// buildVersion reads the module version and VCS stamp the go command puts
// in the binary. `go build` in a checkout stamps vcs.revision; `go run`,
// `go test` and -buildvcs=false do not, which reads as "unknown".
func buildVersion(bi *debug.BuildInfo) (sdk, commit string) {
	sdk, commit = "unknown", "unknown"
	if bi == nil {
		return sdk, commit
	}
	if bi.Main.Path == modulePath {
		sdk = bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath {
			sdk = d.Version
		}
	}
	if sdk == "" {
		sdk = "unknown"
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && commit != "unknown" {
		commit += " (modified)"
	}
	return sdk, commit
}

// onnxRuntime finds and loads the library the SDK would use and reports
// its path and version, or why there is none.
func onnxRuntime(explicit string) string {
	path, err := ort.FindLibrary(explicit)
	if err != nil {
		return "not found: " + oneLine(err)
	}
	if err := ort.Acquire(path); err != nil {
		return fmt.Sprintf("%s does not load: %s", path, oneLine(err))
	}
	v := ort.Version()
	if err := ort.Release(); err != nil {
		return fmt.Sprintf("%s %s (release: %v)", path, v, err)
	}
	return fmt.Sprintf("%s (version %s)", path, v)
}

// oneLine folds a multi-line error (FindLibrary lists every place tried)
// onto one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
