//go:build !linux

package ort

func anonSnapshot() []memRange { return nil }

func collapseNew([]memRange) int64 { return 0 }
