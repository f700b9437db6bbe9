package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
	"github.com/edgeinfer/edgeinfer/update/updatetest"
)

// TestUpdateFleetCommands: the release manager's commands write a
// repository, nginx serves it over HTTPS, and the device's commands
// install from it, health-checking each version in ONNX Runtime.
func TestUpdateFleetCommands(t *testing.T) {
	orttest.Need(t)
	tmp := t.TempDir()
	repo, keys, db := filepath.Join(tmp, "repo"), filepath.Join(tmp, "keys"), filepath.Join(tmp, "device.db")
	run := func(want string, args ...string) string {
		t.Helper()
		return mustRun(t, context.Background(), want, args...)
	}
	run("provision devices with", "fleet", "keygen", "--repo", repo, "--keys", keys)
	b1 := filepath.Join(tmp, "b1")
	run("", "model", "build", "--preset", "tiny-test", "--out", b1)
	run("published tiny-test@1 counter 1", "fleet", "publish", "--repo", repo, "--keys", keys, "--bundle", b1)

	ng := updatetest.StartNginx(t, repo)
	dev := []string{"--store", db, "--model", "tiny-test", "--root", filepath.Join(repo, "image", "1.root.json"), "--source", ng.URL, "--ca", ng.CAFile}
	upd := func(want string, sub string, extra ...string) string {
		t.Helper()
		return run(want, append(append([]string{"update", sub}, dev...), extra...)...)
	}
	upd("active tiny-test@1", "apply")

	// Version 2: the same graph, a new manifest (a re-release).
	b2 := filepath.Join(tmp, "b2")
	os.CopyFS(b2, os.DirFS(b1))
	b, err := bundle.Load(b2)
	if err != nil {
		t.Fatal(err)
	}
	m := b.Manifest
	m.Version = "2"
	var files []string
	for _, f := range m.Files {
		files = append(files, f.Path)
	}
	if err := bundle.Write(b2, &m, files...); err != nil {
		t.Fatal(err)
	}
	out := run("stored 1 new chunks", "fleet", "publish", "--repo", repo, "--keys", keys, "--bundle", b2)
	t.Log(strings.TrimSpace(out))
	upd("offered tiny-test@2 (counter 2)", "check")
	upd("active tiny-test@2", "apply")
	upd("active 2, previous 1", "status")
	upd("active tiny-test@1", "rollback")
	upd("up to date", "apply")

	run("timestamp re-signed", "fleet", "sign", "timestamp", "--repo", repo, "--keys", keys)
	run("root rotated", "fleet", "sign", "root", "--rotate", "targets,snapshot,timestamp", "--repo", repo, "--keys", keys)
	upd("up to date", "check") // follows the rotation, still nothing newer than counter 2
}

// TestUpdateUnknownModel: a model the repository signs no release of is
// an error naming the model and what the repository does sign, not "up
// to date" with exit 0 (a misspelt --model would otherwise look fine
// forever).
func TestUpdateUnknownModel(t *testing.T) {
	tmp := t.TempDir()
	repo, keys := filepath.Join(tmp, "repo"), filepath.Join(tmp, "keys")
	for _, args := range [][]string{
		{"fleet", "keygen", "--repo", repo, "--keys", keys},
		{"model", "build", "--preset", "tiny-test", "--out", filepath.Join(tmp, "b1")},
		{"fleet", "publish", "--repo", repo, "--keys", keys, "--bundle", filepath.Join(tmp, "b1")},
	} {
		var out bytes.Buffer
		if code := runMain(context.Background(), &out, &out, args); code != 0 {
			t.Fatalf("edgeinfer %s: exit %d\n%s", strings.Join(args, " "), code, out.String())
		}
	}
	for _, sub := range []string{"check", "apply"} {
		args := []string{"update", sub, "--store", filepath.Join(tmp, "device.db"), "--model", "nosuchmodel",
			"--root", filepath.Join(repo, "image", "1.root.json"), "--source", repo}
		var stdout, stderr bytes.Buffer
		code := runMain(context.Background(), &stdout, &stderr, args)
		if code == 0 || !strings.Contains(stderr.String(), "nosuchmodel") || !strings.Contains(stderr.String(), "tiny-test@1") {
			t.Errorf("edgeinfer %s: exit %d, want an error naming nosuchmodel and tiny-test@1:\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
		}
		t.Logf("%s: exit %d: %s", sub, code, strings.TrimSpace(stderr.String()))
	}
}
