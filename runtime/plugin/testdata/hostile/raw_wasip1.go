//go:build wasip1

package main

import "unsafe"

//go:wasmimport edgeinfer_host call
func importCall(namePtr, nameLen, reqPtr, reqLen uint32) int32

// rawHostCall calls the host import with a request the guest kit would
// never send.
func rawHostCall(reqPtr, reqLen uint32) { importCall(0, 0, reqPtr, reqLen) }

//go:wasmimport edgeinfer_host read
func importRead(handle, dstPtr, dstLen uint32) int32

// rawRead reads the held data under handle into a small buffer.
func rawRead(handle uint32) {
	var b [16]byte
	importRead(handle, uint32(uintptr(unsafe.Pointer(&b[0]))), 16)
}
