package ort

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// TestKernelTiming: with timing on, each run of a MatMulNBits node counts
// once with some time, and no other operator counts; its products' thread
// time (ProductThreads) is some, and at most the two threads' share of
// the hand-outs' wall time; off, runs are not counted; on again, every
// count starts from zero.
func TestKernelTiming(t *testing.T) {
	needLib(t)
	c := newQ4Case(1, 2048, 512, rand.New(rand.NewPCG(5, 6)))
	s, err := NewSession(context.Background(), q4Model(c, "y"), Options{IntraOpThreads: 2})
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
	// each thread's time inside a hand-out lies within its wall time (the
	// clock's readings a few ns apart on each side)
	if parallel, busy := ProductThreads(); parallel <= 0 || busy <= 0 || busy > 2*parallel+time.Microsecond {
		t.Fatalf("three runs on two threads: hand-outs %v, threads busy %v in them", parallel, busy)
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
	if parallel, busy := ProductThreads(); parallel != 0 || busy != 0 {
		t.Fatalf("timing turned on again: hand-outs %v, threads busy %v, want zero", parallel, busy)
	}
}
