package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/pkg/link/mosquittotest"
	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/rollout"
)

// TestFleetWithoutCgo builds the CLI with CGO_ENABLED=0, a static binary
// with no ONNX Runtime, and runs the fleet side with it: a bundle is
// built, the repositories made and the release signed, and fleet serve
// answers a device's metadata request over a real broker. The same
// source cross-builds static for linux/arm64, which runs under qemu when
// the machine has it. The commands that need ONNX Runtime say so.
func TestFleetWithoutCgo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI twice")
	}
	tmp := t.TempDir()
	build := func(goarch, out string) {
		t.Helper()
		cmd := exec.Command("go", "build", "-o", out, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("CGO_ENABLED=0 GOARCH=%s go build: %v\n%s", goarch, err, b)
		}
	}
	bin := filepath.Join(tmp, "edgeinfer")
	build(runtime.GOARCH, bin)
	run := func(want string, args ...string) string {
		t.Helper()
		b, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(b), want) {
			t.Fatalf("edgeinfer %s: %v, want %q in:\n%s", strings.Join(args, " "), err, want, b)
		}
		return string(b)
	}
	if b, err := exec.Command(bin, "generate", "x").CombinedOutput(); err == nil || !strings.Contains(string(b), "CGO_ENABLED=0") {
		t.Errorf("generate in a cgo-free build: %v\n%s", err, b)
	}
	repo, keys, bdir := filepath.Join(tmp, "repo"), filepath.Join(tmp, "keys"), filepath.Join(tmp, "bundle")
	run("", "model", "build", "--preset", "tiny-test", "--out", bdir)
	run("director root", "fleet", "keygen", "--repo", repo, "--keys", keys, "--director")
	run("published tiny-test@", "fleet", "publish", "--repo", repo, "--keys", keys, "--bundle", bdir)

	b := mosquittotest.Start(t, mosquittotest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	serve := exec.CommandContext(ctx, bin, "fleet", "serve", "--broker", b.URL(), "--fleet", "f", "--repo", repo, "--instance", "a", "--stats-every", "0")
	serve.Cancel = func() error { return serve.Process.Signal(os.Interrupt) }
	var serveOut syncBuffer
	serve.Stdout, serve.Stderr = &serveOut, &serveOut
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = serve.Wait()
	}()
	l, err := link.Open(ctx, link.Config{Broker: b.URL(), Fleet: "f", Device: "d"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	src := update.MQTTSource{R: rollout.Requester{L: l, Timeout: 2 * time.Second}}
	if !serveOut.waitFor(20*time.Second, "answering requests") {
		t.Fatalf("fleet serve (no cgo) not subscribed within 20 s:\n%s", serveOut.String())
	}
	meta, err := src.FetchMeta(ctx, "image/timestamp.json", 1<<16)
	if err != nil {
		t.Fatalf("fleet serve (no cgo), subscribed, did not answer: %v\n%s", err, serveOut.String())
	}
	if !strings.Contains(strings.ReplaceAll(string(meta), " ", ""), `"_type":"timestamp"`) {
		t.Errorf("timestamp metadata: %.200s", meta)
	}

	arm := filepath.Join(tmp, "edgeinfer-arm64")
	build("arm64", arm)
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if runtime.GOARCH != "arm64" && err != nil {
		t.Logf("static linux/arm64 build made; qemu-aarch64-static absent, not run")
		return
	}
	var cmd *exec.Cmd
	if runtime.GOARCH == "arm64" {
		cmd = exec.Command(arm, "fleet", "keygen", "--repo", filepath.Join(tmp, "repo2"), "--keys", filepath.Join(tmp, "keys2"))
	} else {
		cmd = exec.Command(qemu, arm, "fleet", "keygen", "--repo", filepath.Join(tmp, "repo2"), "--keys", filepath.Join(tmp, "keys2"))
	}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "root") {
		t.Errorf("static arm64 fleet keygen: %v\n%s", err, out)
	}
}
