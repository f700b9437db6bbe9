//go:build !linux

package ort

type residentSet map[uintptr]bool

func anonResident() residentSet { return nil }

func collapseNew(residentSet) int64 { return 0 }
