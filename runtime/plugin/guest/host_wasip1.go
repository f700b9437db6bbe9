//go:build wasip1

package guest

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

//go:wasmimport edgeinfer_host call
func importCall(namePtr, nameLen, reqPtr, reqLen uint32) int32

//go:wasmimport edgeinfer_host take
func importTake(dstPtr, dstLen uint32) int32

//go:wasmimport edgeinfer_host read
func importRead(handle, dstPtr, dstLen uint32) int32

func addr(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// hostReq is reused for every primitive's request: the request is needed
// only during the call (the guest is single-threaded). It names the
// tensors' data where it lies (abi.EncodeRefs), so a large input is not
// copied on its way to the host (BenchmarkCTC).
var hostReq []byte

// hostCall runs the primitive and returns its encoded response in a
// buffer of its own for the rest of the request (decoded outputs alias it).
func hostCall(name string, in []abi.Tensor) []byte {
	hostReq = abi.EncodeRefs(hostReq[:0], in, addr)
	nb := []byte(name)
	n := importCall(addr(nb), uint32(len(nb)), addr(hostReq), uint32(len(hostReq)))
	runtime.KeepAlive(nb)
	runtime.KeepAlive(in)
	resp := respBuffer(int(n))
	if importTake(addr(resp), uint32(n)) != n {
		panic("guest: edgeinfer_host.take returned another length than call")
	}
	return resp
}

// The responses' buffers are kept for the next requests: a fresh buffer
// per call for a large output (an image's pixels) kept the guest's
// collector busy longer than the primitive ran (BenchmarkResize). Within a
// request each call gets its own buffer (outputs stay valid until the
// request ends, as its inputs do); resetHost frees them all for the next.
var (
	respBufs [][]byte
	respUsed int
)

func respBuffer(n int) []byte {
	if respUsed == len(respBufs) {
		respBufs = append(respBufs, nil)
	}
	if cap(respBufs[respUsed]) < n {
		respBufs[respUsed] = make([]byte, max(n, 8))
	}
	b := respBufs[respUsed][:n]
	respUsed++
	return b
}

func resetHost() { respUsed = 0 }

// readHeld copies the held tensor's data into a buffer of its own for the
// rest of the request.
func readHeld(t abi.Tensor) ([]byte, error) {
	n := t.ByteLen()
	if n > 1<<31-1 {
		return nil, fmt.Errorf("held tensor %v: %d bytes is over 2 GiB", t, n)
	}
	b := respBuffer(int(n))
	if got := importRead(t.Handle, addr(b[:cap(b)]), uint32(n)); got != int32(n) {
		return nil, fmt.Errorf("held tensor %v: the host read %d bytes, want %d", t, got, n)
	}
	return b, nil
}
