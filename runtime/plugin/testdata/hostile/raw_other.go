//go:build !wasip1

package main

func rawHostCall(reqPtr, reqLen uint32) { panic("rawHostCall: wasip1 only") }

func rawRead(uint32) { panic("rawRead: wasip1 only") }
