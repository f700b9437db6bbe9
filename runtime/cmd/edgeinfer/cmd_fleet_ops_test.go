package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/runtime/device/fleettest"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
	"github.com/edgeinfer/edgeinfer/update/fleet"
)

// TestFleetCommands: keygen, publish, serve, rollout and status against a
// local mosquitto and simulated devices: the devices install the release
// through the waves, and status (table and JSON) shows them on it.
func TestFleetCommands(t *testing.T) {
	orttest.Need(t)
	ctx := context.Background()
	b := mosquittotest.Start(t, mosquittotest.Options{})
	tmp := t.TempDir()
	repo, keys, bdir := filepath.Join(tmp, "repo"), filepath.Join(tmp, "keys"), filepath.Join(tmp, "b1")
	run := func(want string, args ...string) string { t.Helper(); return mustRun(t, ctx, want, args...) }
	run("director root", "fleet", "keygen", "--repo", repo, "--keys", keys, "--director")
	if err := fleettest.TinyBundle(ctx, bdir, "tiny", "1", ""); err != nil {
		t.Fatal(err)
	}
	if err := fleettest.SetHealth(ctx, bdir, 4, false); err != nil {
		t.Fatal(err)
	}
	run("published tiny@1", "fleet", "publish", "--repo", repo, "--keys", keys, "--bundle", bdir)

	sctx, stop := context.WithCancel(ctx)
	var serveOut syncBuffer
	done := make(chan int)
	go func() {
		done <- runMain(sctx, &serveOut, &serveOut, []string{"fleet", "serve", "--broker", b.URL(), "--fleet", "f", "--repo", repo, "--keys", keys, "--instance", "a", "--stats-every", "0"})
	}()
	defer func() {
		stop()
		if code := <-done; code != 0 {
			t.Errorf("fleet serve exit %d:\n%s", code, serveOut.String())
		}
	}()
	f, err := fleettest.StartFleet(ctx, fleettest.Options{Broker: b.URL(), Fleet: "f", Dir: t.TempDir(), Model: "tiny", Board: "sim",
		ImageRoot: filepath.Join(repo, "image", "1.root.json"), DirectorRoot: filepath.Join(repo, "director", "1.root.json"),
		Labels: func(i int) map[string]string { return map[string]string{"line": "1"} }, Load: 500 * time.Millisecond, TelemetryInterval: time.Second}, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The leader must know the devices before the rollout picks its
	// targets. It runs inside runMain, out of reach: an operator's view
	// shows when fleet serve is online (connected, subscribed) and the
	// devices' retained states are on the broker, which delivers them to
	// the leader ahead of the rollout sent after.
	op, err := fleet.Dial(ctx, fleet.ClientConfig{Broker: b.URL(), Fleet: "f"})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	ready := func() bool {
		n := 0
		for _, d := range op.View().Devices() {
			if d.Update != nil {
				n++
			}
		}
		return n == 3 && slices.Contains(op.View().Instances(), "a")
	}
	timeout := time.After(time.Minute)
	for changed := op.View().Changed(); !ready(); changed = op.View().Changed() {
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("within a minute, fleet serve online %v and %d devices in the operator's view", op.View().Instances(), len(op.View().Devices()))
		}
	}
	run("rollout tiny-1 of tiny@1 started", "fleet", "rollout", "--broker", b.URL(), "--fleet", "f", "--release", "tiny@1", "--waves", "34,100", "--select", "line=1,board=sim")
	deadline := time.Now().Add(2 * time.Minute)
	var rep fleet.StatusReport
	for {
		out := run("", "fleet", "status", "--broker", b.URL(), "--fleet", "f", "--json", "--wait", "1500ms")
		rep = fleet.StatusReport{}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		if rep.Versions["1"] == 3 && len(rep.Rollouts) == 1 && rep.Rollouts[0].State == fleet.RolloutCompleted && rep.Devices[0].GoodputTokS != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the rollout complete with telemetry: %+v", rep)
		}
	}
	d := rep.Devices[0]
	if d.Board != "sim" || !d.Online || d.Step != fleet.StepUpdated || d.Health != "ok" || d.TTFTP99MS == nil {
		t.Errorf("device row %+v", d)
	}
	table := run("tiny-1", "fleet", "status", "--broker", b.URL(), "--fleet", "f", "--wait", "1s")
	if !strings.Contains(table, "completed") || !strings.Contains(table, "dev-002") {
		t.Errorf("status table:\n%s", table)
	}
	t.Logf("\n%s", table)
	run("pause sent", "fleet", "rollout", "--broker", b.URL(), "--fleet", "f", "--id", "tiny-1", "pause")
}

// TestFleetRolloutControlUsage: a control that would do nothing is a
// usage error (exit 2) before anything is sent: a rollback naming no
// device, or an action the fleet does not know. No broker is needed to
// tell.
func TestFleetRolloutControlUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--id", "tiny-2", "rollback"}, []string{"--devices", "--select"}},
		{[]string{"--id", "tiny-2", "rollbak"}, []string{"rollbak", "pause", "rollback"}},
	} {
		args := append([]string{"fleet", "rollout", "--broker", "tcp://127.0.0.1:1", "--fleet", "f"}, tc.args...)
		var stdout, stderr bytes.Buffer
		// Nothing listens on the broker's port: a command that tried to
		// connect would wait for it until the deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		code := runMain(ctx, &stdout, &stderr, args)
		cancel()
		out := stdout.String() + stderr.String()
		if code != 2 {
			t.Errorf("edgeinfer %s: exit %d, want 2:\n%s", strings.Join(args, " "), code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("edgeinfer %s: %q missing from:\n%s", strings.Join(args, " "), w, out)
			}
		}
	}
}
