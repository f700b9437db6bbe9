package link

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
)

// TestKillPublisher SIGKILLs a child process that publishes through the
// outbox, mid-stream, and starts it again on the same store: every
// message the child had reported durable (Sync returned) must arrive.
func TestKillPublisher(t *testing.T) {
	if emu := os.Getenv("EDGEINFER_EMULATED"); emu != "" {
		// `go test -exec` runs this binary under qemu-user; re-executing
		// os.Args[0] would start a foreign binary natively. The native run
		// of the suite covers the child-process tests.
		t.Skipf("child processes need a native test binary (running under %s)", emu)
	}
	b := mosquittotest.Start(t, mosquittotest.Options{Persistence: true})
	rcv := newReceiver(t, b, "cloud", "edgeinfer/v1/f/d/telemetry")
	path := filepath.Join(t.TempDir(), "store.db")

	// first run: killed once 5,000 messages are durable
	durable := runChild(t, b, path, 1_000_000, 5_000)
	// second run: resumes from the outbox and adds 1,000 more
	durable2 := runChild(t, b, path, 1_000, 0)
	if durable2 <= durable {
		t.Fatalf("second run ended at seq %d, not after %d", durable2, durable)
	}
	waitFor(30*time.Second, rcv.Changed, func() bool { return rcv.distinct() >= int(durable2) })
	received, lost, dups, ooo := rcv.tally(durable)
	t.Logf("killed after %d durable: received %d lost %d duplicates %d out_of_order %d", durable, received, lost, dups, ooo)
	if lost != 0 {
		t.Errorf("lost %d of the %d messages the killed process had made durable", lost, durable)
	}
	if r2, l2, _, _ := rcv.tally(durable2); l2 != 0 {
		t.Errorf("after the restart: %d of %d lost", l2, r2+l2)
	}
}

// runChild runs this test binary as a publisher child; with kill > 0 it
// is SIGKILLed once it reports that many durable messages. It returns the
// highest seq the child reported durable.
func runChild(t *testing.T, b *mosquittotest.Broker, path string, n, kill int) uint64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPublisherChild$", "-test.v")
	cmd.Env = append(os.Environ(), "LINK_CHILD_STORE="+path, "LINK_CHILD_BROKER="+b.URL(), "LINK_CHILD_N="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var last uint64
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "durable" {
			last, _ = strconv.ParseUint(f[1], 10, 64)
			if kill > 0 && last >= uint64(kill) {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				break
			}
		}
	}
	_ = cmd.Wait()
	if last == 0 {
		t.Fatal("child reported nothing durable")
	}
	return last
}

// TestPublisherChild is the child of TestKillPublisher (skipped otherwise).
func TestPublisherChild(t *testing.T) {
	path := os.Getenv("LINK_CHILD_STORE")
	if path == "" {
		t.Skip("child process of TestKillPublisher")
	}
	n, _ := strconv.Atoi(os.Getenv("LINK_CHILD_N"))
	st := openStore(t, path)
	defer st.Close()
	ctx := context.Background()
	cfg := Config{Broker: os.Getenv("LINK_CHILD_BROKER"), Fleet: "f", Device: "d", BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond}
	l, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ob, err := OpenOutbox(ctx, st, l, OutboxConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	var seq uint64
	for i := 1; i <= n; i++ {
		seq, err = ob.Enqueue(ctx, l.Topics().Telemetry(), ClassTelemetry, func(s uint64) []byte { return seqPayload(s, 100) })
		if err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 || i == n {
			if err := ob.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			fmt.Printf("durable %d\n", seq)
		}
	}
	if err := ob.Flush(withTimeout(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
}
