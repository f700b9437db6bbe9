package ort

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// TestFirstSessionsAtOnce: the first sessions of a process that use
// edgeinfer's operators, created at once, all load (ONNX Runtime adds the
// operator domain to its registry on the first session without a lock:
// two devices of one process loading their first model together failed
// with "the domain is already exist"). Each round is a fresh process,
// whose first sessions are the ones raced (without the fix, one round in
// about five failed).
func TestFirstSessionsAtOnce(t *testing.T) {
	needLib(t)
	if os.Getenv(firstSessionsEnv) != "" {
		t.Skip("the child of TestFirstSessionsAtOnce")
	}
	if emu := os.Getenv("EDGEINFER_EMULATED"); emu != "" {
		// `go test -exec` runs this binary under qemu-user; os.Args[0]
		// would start a foreign binary natively. The race is in ONNX
		// Runtime's registry, not in the architecture: the native run
		// covers it.
		t.Skipf("child processes need a native test binary (running under %s)", emu)
	}
	for round := range 30 {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestFirstSessionsChild$", "-test.v")
		cmd.Env = append(os.Environ(), firstSessionsEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestFirstSessionsChild") {
			t.Fatalf("round %d: %v\n%s", round, err, out)
		}
	}
}

const firstSessionsEnv = "EDGEINFER_FIRST_SESSIONS_CHILD"

// TestFirstSessionsChild opens 8 sessions at once, first thing.
func TestFirstSessionsChild(t *testing.T) {
	if os.Getenv(firstSessionsEnv) == "" {
		t.Skip("runs only as a child process of TestFirstSessionsAtOnce")
	}
	needLib(t)
	model := q4Model(newQ4Case(1, 64, 64, rand.New(rand.NewPCG(1, 2))))
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			s, err := NewSession(context.Background(), model, Options{IntraOpThreads: 1})
			if err == nil {
				err = s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("session %d: %v", i, fmt.Sprint(err))
		}
	}
}
