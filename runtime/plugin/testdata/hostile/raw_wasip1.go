//go:build wasip1

package main

//go:wasmimport edgeinfer_host call
func importCall(namePtr, nameLen, reqPtr, reqLen uint32) int32

// rawHostCall calls the host import with a request the guest kit would
// never send.
func rawHostCall(reqPtr, reqLen uint32) { importCall(0, 0, reqPtr, reqLen) }
