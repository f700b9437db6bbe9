package mosquittotest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// brokerEnv names the broker the tests run against: "mochi" for
// mochi-mqtt, anything else for mosquitto.
const brokerEnv = "EDGEINFER_TEST_BROKER"

// Mochi says whether the tests run against mochi-mqtt.
func Mochi() bool { return os.Getenv(brokerEnv) == "mochi" }

// startMochi starts mochi-mqtt with what of opt it can honour, and skips
// the test for what it cannot.
func startMochi(t testing.TB, opt Options) *Broker {
	t.Helper()
	switch {
	case opt.CAFile != "", len(opt.Users) > 0, opt.ACL != "", opt.DynSec != nil:
		t.Skip("mochi-mqtt (EDGEINFER_TEST_BROKER=mochi) is run here without TLS, users or ACLs: this test needs mosquitto")
	case strings.Contains(opt.Extra, "connection "):
		t.Skip("mochi-mqtt (EDGEINFER_TEST_BROKER=mochi) does not bridge: this test needs mosquitto")
	}
	// The rest of Extra tunes mosquitto's queues and $SYS interval, which
	// the mochi command sets as the tests need (platforms/brokers/mochi).
	bin, err := mochiBinary()
	if err != nil {
		t.Fatalf("EDGEINFER_TEST_BROKER=mochi: %v", err)
	}
	b := &Broker{t: t, Port: FreePort(t), dir: t.TempDir(), mochi: bin, persist: opt.Persistence}
	b.Start()
	t.Cleanup(b.Stop)
	return b
}

var mochiOnce = sync.OnceValues(buildMochi)

func mochiBinary() (string, error) { return mochiOnce() }

// buildMochi builds platforms/brokers/mochi once per version of its
// source, into the user's temporary directory, shared by the test
// processes of one `go test ./...`.
func buildMochi() (string, error) {
	src, err := mochiSource()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, f := range []string{"main.go", "go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	bin := filepath.Join(os.TempDir(), "edgeinfer-mochi", hex.EncodeToString(h.Sum(nil))[:16], "mochi")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(bin), "mochi-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	cmd := exec.Command("go", "build", "-o", tmp.Name(), ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp.Name())
		return "", &buildError{err: err, out: string(out)}
	}
	return bin, os.Rename(tmp.Name(), bin) // whole, or not there
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string {
	return "go build platforms/brokers/mochi: " + e.err.Error() + "\n" + e.out
}

// mochiSource finds platforms/brokers/mochi above the working directory
// (a test runs in its package's directory).
func mochiSource() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "platforms", "brokers", "mochi")
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
