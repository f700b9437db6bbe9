//go:build wasip1

package guest

import (
	"unsafe"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

// The buffers live in package variables so the garbage collector keeps
// them (and Go's collector does not move objects): the host writes the
// request at the address edgeinfer_alloc returned and reads the response
// at the address edgeinfer_run returned, until the next call.
var inBuf, outBuf []byte

//go:wasmexport edgeinfer_abi_version
func abiVersion() int32 { return abi.Version }

// featureBits tells the host what Handle's options asked for (ABI.md,
// "Held tensors").
//
//go:wasmexport edgeinfer_features
func featureBits() int32 { return features }

// alloc returns the address of a buffer of size bytes for the request (0
// when size is negative). The buffer is reused across calls.
//
//go:wasmexport edgeinfer_alloc
func alloc(size int32) int32 {
	if size < 0 {
		return 0
	}
	if cap(inBuf) < int(size) || cap(inBuf) == 0 {
		inBuf = make([]byte, max(size, 8))
	}
	inBuf = inBuf[:size]
	return int32(uintptr(unsafe.Pointer(unsafe.SliceData(inBuf[:cap(inBuf)]))))
}

// run handles the request of size bytes at the buffer alloc returned and
// returns the response's address (high 32 bits) and length (low 32 bits).
//
//go:wasmexport edgeinfer_run
func run(ptr, size int32) int64 {
	var req []byte
	if size >= 0 && int(size) <= cap(inBuf) && uintptr(ptr) == uintptr(unsafe.Pointer(unsafe.SliceData(inBuf[:cap(inBuf)]))) {
		req = inBuf[:size]
	}
	outBuf = Call(outBuf, req)
	p := uint32(uintptr(unsafe.Pointer(unsafe.SliceData(outBuf))))
	return int64(uint64(p)<<32 | uint64(uint32(len(outBuf))))
}
