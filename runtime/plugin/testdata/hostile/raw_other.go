//go:build !wasip1

package main

func rawHostCall(reqPtr, reqLen uint32) { panic("rawHostCall: wasip1 only") }
