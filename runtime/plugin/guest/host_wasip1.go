//go:build wasip1

package guest

import (
	"runtime"
	"unsafe"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

//go:wasmimport edgeinfer_host call
func importCall(namePtr, nameLen, reqPtr, reqLen uint32) int32

//go:wasmimport edgeinfer_host take
func importTake(dstPtr, dstLen uint32) int32

func addr(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// hostReq is reused for every primitive's request: the request is needed
// only during the call (the guest is single-threaded). It names the
// tensors' data where it lies (abi.EncodeRefs), so a large input is not
// copied on its way to the host (BenchmarkCTC).
var hostReq []byte

// hostCall runs the primitive and returns its encoded response in a new
// buffer (decoded outputs alias it, so it is not reused).
func hostCall(name string, in []abi.Tensor) []byte {
	hostReq = abi.EncodeRefs(hostReq[:0], in, addr)
	nb := []byte(name)
	n := importCall(addr(nb), uint32(len(nb)), addr(hostReq), uint32(len(hostReq)))
	runtime.KeepAlive(nb)
	runtime.KeepAlive(in)
	resp := make([]byte, max(n, 8))[:n]
	if importTake(addr(resp), uint32(n)) != n {
		panic("guest: edgeinfer_host.take returned another length than call")
	}
	return resp
}
