package ort

import (
	"context"
	"math/rand/v2"
	"testing"
)

// TestKernelTiming: with timing on, each run of a MatMulNBits node counts
// once with some time, and no other operator counts; off, runs are not
// counted; on again, the count starts from zero.
func TestKernelTiming(t *testing.T) {
	needLib(t)
	c := newQ4Case(3, 32, 64, rand.New(rand.NewPCG(5, 6)))
	s, err := NewSession(context.Background(), q4Model(c, "y"), Options{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer SetKernelTiming(false)
	matmul := func() KernelTime {
		t.Helper()
		var found KernelTime
		for _, k := range KernelTimes() {
			switch {
			case k.Op == "MatMulNBits":
				found = k
			case k.Runs != 0 || k.Time != 0:
				t.Fatalf("%s counted %d runs (%v), though no node of it ran", k.Op, k.Runs, k.Time)
			}
		}
		if found.Op == "" {
			t.Fatalf("no MatMulNBits among %+v", KernelTimes())
		}
		return found
	}
	SetKernelTiming(true)
	for range 3 {
		c.run(t, s)
	}
	if k := matmul(); k.Runs != 3 || k.Time <= 0 {
		t.Fatalf("three runs with timing on: %+v", k)
	}
	SetKernelTiming(false)
	c.run(t, s)
	if k := matmul(); k.Runs != 3 {
		t.Fatalf("a run with timing off was counted: %+v", k)
	}
	SetKernelTiming(true)
	if k := matmul(); k.Runs != 0 || k.Time != 0 {
		t.Fatalf("timing turned on again did not start from zero: %+v", k)
	}
}
