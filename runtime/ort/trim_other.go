//go:build !(linux && cgo)

package ort

func trimHeap() {}

func pinMmapThreshold() {}
