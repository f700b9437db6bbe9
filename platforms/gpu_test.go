package platforms

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// On a machine without an NVIDIA driver the GPU check stops at once with
// exit status 3 and says what the host lacks (the lent GPU machines run
// the rest of it).
func TestGPUCheckWithoutGPU(t *testing.T) {
	if _, err := os.Stat("/proc/driver/nvidia/version"); err == nil {
		t.Skip("this machine has an NVIDIA driver: gpu/check.sh would run for real")
	}
	if _, err := exec.LookPath("nvidia-smi"); err == nil {
		t.Skip("nvidia-smi present")
	}
	kit := t.TempDir()
	out, err := exec.Command("bash", filepath.Join("gpu", "check.sh"), "run", kit).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exit %v, want 3:\n%s", err, out)
	}
	if !strings.Contains(string(out), "HOST LACKS: an NVIDIA GPU with its driver") {
		t.Errorf("output:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(kit, "out", "summary.txt")); err != nil || !strings.Contains(string(b), "HOST LACKS") {
		t.Errorf("summary: %v %q", err, b)
	}
}
