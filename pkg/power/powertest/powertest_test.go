package powertest_test

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/power/powertest"
)

func TestFS(t *testing.T) {
	m := powertest.NewFS(map[string]string{"sys/class/thermal/thermal_zone0/temp": "45000"})
	f, err := m.Open("sys/class/thermal/thermal_zone0/temp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m.Set("sys/class/thermal/thermal_zone0/temp", "71000")
	// An open handle reads the live value, as a sysfs attribute does.
	b := make([]byte, 16)
	n, _ := f.(interface {
		ReadAt([]byte, int64) (int, error)
	}).ReadAt(b, 0)
	if string(b[:n]) != "71000" {
		t.Fatalf("live read %q", b[:n])
	}
	m.Remove("sys/class/thermal/thermal_zone0/temp")
	if _, err := f.(interface {
		ReadAt([]byte, int64) (int, error)
	}).ReadAt(b, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read after remove: %v", err)
	}
	if _, err := fs.ReadDir(m, "sys/class/thermal"); err == nil {
		t.Fatal("directory of a removed file still lists")
	}
	m.Set("sys/class/power_supply/BAT0/power_now", "5000000")
	if got, err := fs.ReadFile(m, "sys/class/power_supply/BAT0/power_now"); err != nil || string(got) != "5000000" {
		t.Fatalf("ReadFile %q %v", got, err)
	}
}
