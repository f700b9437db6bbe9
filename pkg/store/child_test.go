package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Child processes: the test binary re-executes itself with childEnv set
// to a role, and TestChild plays that role instead of testing.
const (
	childEnv   = "EDGEINFER_STORE_CHILD"
	childStore = "EDGEINFER_STORE_CHILD_DB"
)

func startChild(t *testing.T, role, db string) *exec.Cmd {
	t.Helper()
	if emu := os.Getenv("EDGEINFER_EMULATED"); emu != "" {
		// `go test -exec` runs this binary under qemu-user; re-executing
		// os.Args[0] would start a foreign binary natively. The native run
		// of the suite covers the child-process tests.
		t.Skipf("child processes need a native test binary (running under %s)", emu)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.v=false")
	// The child's own temporary files go under the test's directory: a
	// child killed mid-import cannot remove them, the test's cleanup does.
	cmd.Env = append(os.Environ(), childEnv+"="+role, childStore+"="+db, "TMPDIR="+t.TempDir())
	cmd.Stderr = os.Stderr
	return cmd
}

func TestChild(t *testing.T) {
	role := os.Getenv(childEnv)
	if role == "" {
		t.Skip("runs only as a child process of another test")
	}
	db := os.Getenv(childStore)
	ctx := context.Background()
	s, err := Open(ctx, db, Options{LockTimeout: 10 * time.Second, TxBytes: 256 << 10})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	switch role {
	case "hold":
		fmt.Println("ready")
		bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes stdin
		s.Close()
		os.Exit(0)
	case "churn":
		churn(ctx, s)
	}
	os.Exit(4)
}

// churn imports, activates, rolls back, removes and collects forever, until
// the parent kills it.
func churn(ctx context.Context, s *Store) {
	pid := os.Getpid()
	var mine []string
	for i := 0; ; i++ {
		version := strconv.Itoa(pid) + "-" + strconv.Itoa(i)
		dir, err := os.MkdirTemp("", "churn")
		if err != nil {
			os.Exit(5)
		}
		writeBundle(panicTB{}, dir, crashModel, version, crashFiles(version))
		if _, err := s.Import(ctx, dir, nil); err != nil {
			fmt.Fprintln(os.Stderr, "child import:", err)
			os.Exit(6)
		}
		os.RemoveAll(dir)
		mine = append(mine, version)
		ref := crashModel + "@" + version
		if err := s.Activate(ctx, ref); err != nil {
			os.Exit(7)
		}
		if i%3 == 2 {
			if _, err := s.Rollback(ctx, crashModel); err != nil {
				os.Exit(8)
			}
		}
		// Remove this process's versions that are neither active nor
		// previous; versions from before it started are the parent's to
		// check.
		for _, v := range mine[:len(mine)-1] {
			if err := s.Remove(ctx, crashModel+"@"+v); err == nil {
				mine = slicesDelete(mine, v)
				break
			}
		}
		if _, err := s.GC(ctx); err != nil {
			os.Exit(9)
		}
	}
}

func slicesDelete(s []string, v string) []string {
	for i := range s {
		if s[i] == v {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// panicTB lets test helpers run in a child process outside a test.
type panicTB struct{ testing.TB }

func (panicTB) Helper()           {}
func (panicTB) Fatal(args ...any) { panic(fmt.Sprint(args...)) }
