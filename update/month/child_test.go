package month_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/device/fleettest"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// The test binary is also each device and the fleet server: started again
// with childEnv set, it runs that part until SIGTERM (a clean stop) or
// SIGKILL.
const (
	childEnv  = "EDGEINFER_MONTH_CHILD"  // "device" or "serve"
	configEnv = "EDGEINFER_MONTH_CONFIG" // a childConfig as JSON
)

type childConfig struct {
	Broker, Fleet, Dir           string
	Repo, Keys                   string
	ImageRoot, DirectorRoot      string
	Index                        int
	ID                           string
	Labels                       map[string]string
	CapBytesPerSec               int64
	TelemetryMS, CheckMS, LoadMS int64
}

// clockFile holds a device's clock offset in seconds: the test writes it
// to make the board's clock jump.
func clockFile(dir string) string { return filepath.Join(dir, "clock-offset") }

// runChild runs the part childEnv names and returns the exit code.
func runChild(kind string) int {
	var c childConfig
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &c); err != nil {
		fmt.Fprintln(os.Stderr, "month child:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var closeFn func() error
	switch kind {
	case "device":
		dir := filepath.Join(c.Dir, c.ID)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// The offset is read at every reading of the clock: a jump shows
		// at the agent's next check, as on a board whose clock is set.
		now := func() time.Time {
			b, _ := os.ReadFile(clockFile(dir))
			s, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return time.Now().Add(time.Duration(s) * time.Second)
		}
		d, err := fleettest.Start(context.Background(), fleettest.Options{Broker: c.Broker, Fleet: c.Fleet, Dir: c.Dir,
			ImageRoot: c.ImageRoot, DirectorRoot: c.DirectorRoot, Model: model, Board: "sim",
			Labels:            func(int) map[string]string { return c.Labels },
			TelemetryInterval: time.Duration(c.TelemetryMS) * time.Millisecond,
			CheckInterval:     time.Duration(c.CheckMS) * time.Millisecond,
			Load:              time.Duration(c.LoadMS) * time.Millisecond,
			MaxBytesPerSec:    c.CapBytesPerSec, Now: now}, c.Index, c.ID)
		if err != nil {
			fmt.Fprintln(os.Stderr, "device start:", err)
			return 1
		}
		closeFn = d.Close
	case "serve":
		s, err := fleet.Serve(context.Background(), fleet.ServeConfig{Broker: c.Broker, Fleet: c.Fleet, Instance: "a",
			Repo: c.Repo, Keys: []string{c.Keys}, Tick: 200 * time.Millisecond})
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleet serve:", err)
			return 1
		}
		closeFn = func() error {
			b, _ := json.Marshal(s.Stats())
			fmt.Println("stats", string(b))
			return s.Close()
		}
	default:
		fmt.Fprintln(os.Stderr, "month child: unknown kind", kind)
		return 2
	}
	fmt.Println("ready")
	<-ctx.Done()
	if err := closeFn(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		return 1
	}
	return 0
}
