// Package guest is the kit for plugins written in Go: it implements the
// exports of the edgeinfer plugin ABI (runtime/plugin/ABI.md) so that a
// plugin is one handler function:
//
//	package main
//
//	import (
//		"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
//		"github.com/edgeinfer/edgeinfer/runtime/plugin/guest"
//	)
//
//	func init() { guest.Handle(run) }
//
//	func main() {} // a reactor: the host calls the exports, never main
//
//	func run(in []abi.Tensor) ([]abi.Tensor, error) { ... }
//
// built with the standard toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o p.wasm ./myplugin
//
// Input tensors alias the kit's input buffer: they are valid during the
// call only (copy what must outlive it). A returned error, or a panic in
// the handler, reaches the host as that request's error; the module keeps
// serving. Outside wasip1 the package compiles (so plugins build and vet
// on the host) but Handle only records the handler, which Call runs: tests
// can run a plugin's handler natively through the same encoding.
package guest

import (
	"errors"
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

// Handler processes one request.
type Handler func(in []abi.Tensor) ([]abi.Tensor, error)

var (
	handler  Handler
	features int32 // edgeinfer_features: what the plugin asked the host for
)

// Option changes what the kit asks of the host for the handler.
type Option func()

// HoldLarge asks the host to keep each input of 64 KiB or more
// (plugin.HeldMin) on its side: the handler gets it as a held tensor
// (abi.Tensor.Held; shape and type, no data), which Host passes to a
// primitive without the bytes ever entering the sandbox, and which Read
// copies in when the handler must look at its elements; returned as an
// output, it is that input unchanged (the host fills in the data). For
// plugins that hand their large inputs to primitives (a recogniser's
// output to argmax.rows, a detector's map to db.boxes): the copy into the
// module was a fifth of the CTC plugin's time (BenchmarkCTC).
func HoldLarge() Option { return func() { features |= 1 } }

// Handle registers the plugin's handler; call it from an init function.
func Handle(h Handler, opts ...Option) {
	handler, features = h, 0
	for _, o := range opts {
		o()
	}
}

// Call runs the registered handler on an encoded request and returns the
// encoded response (tensors or an error message), as the exported
// edgeinfer_run does. dst is reused for the response.
func Call(dst, req []byte) []byte {
	resetHost()
	in, err := abi.Decode(req)
	if err != nil {
		return abi.EncodeError(dst[:0], err.Error())
	}
	out, err := safeRun(in)
	if err == nil {
		err = abi.Validate(out)
	}
	if err != nil {
		return abi.EncodeError(dst[:0], err.Error())
	}
	return abi.Encode(dst[:0], out)
}

func safeRun(in []abi.Tensor) (out []abi.Tensor, err error) {
	if handler == nil {
		return nil, errors.New("guest: no handler registered (call guest.Handle from init)")
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return handler(in)
}
