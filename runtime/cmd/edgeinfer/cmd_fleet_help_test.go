package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestFleetHelpListsSubcommands: 'edgeinfer fleet -h' lists every
// registered fleet subcommand on a line of its own with its one-line
// summary, and the CLI's own help names each of them beside fleet. The
// list comes from the registry, so a subcommand added without a summary,
// or one the help leaves out, fails here.
func TestFleetHelpListsSubcommands(t *testing.T) {
	if len(fleetCommands) == 0 {
		t.Fatal("no fleet subcommands registered")
	}
	var stdout, stderr bytes.Buffer
	if code := runMain(context.Background(), &stdout, &stderr, []string{"fleet", "-h"}); code != 0 {
		t.Fatalf("edgeinfer fleet -h: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	help := stdout.String()
	lines := strings.Split(help, "\n")
	for name, c := range fleetCommands {
		if c.summary == "" || strings.Contains(c.summary, "\n") {
			t.Errorf("fleet %s: summary %q, want one non-empty line", name, c.summary)
		}
		found := false
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) > 1 && f[0] == name && strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), name)) == c.summary {
				found = true
			}
		}
		if !found {
			t.Errorf("edgeinfer fleet -h has no line \"  %s  %s\":\n%s", name, c.summary, help)
		}
	}

	stdout.Reset()
	if code := runMain(context.Background(), &stdout, &stderr, []string{"-h"}); code != 0 {
		t.Fatalf("edgeinfer -h: exit %d", code)
	}
	var fleetLine string
	for _, l := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "fleet" {
			fleetLine = l
		}
	}
	for name := range fleetCommands {
		if !strings.Contains(fleetLine, name) {
			t.Errorf("edgeinfer -h: the fleet line %q does not name %s", fleetLine, name)
		}
	}
}

// TestFleetSubcommandHelp: each fleet subcommand answers -h on stdout with
// exit 0, and an unknown one is a usage error that lists the real ones.
func TestFleetSubcommandHelp(t *testing.T) {
	for name := range fleetCommands {
		var stdout, stderr bytes.Buffer
		if code := runMain(context.Background(), &stdout, &stderr, []string{"fleet", name, "-h"}); code != 0 {
			t.Errorf("edgeinfer fleet %s -h: exit %d\n%s", name, code, stderr.String())
			continue
		}
		if !strings.Contains(stdout.String(), "usage: edgeinfer fleet") {
			t.Errorf("edgeinfer fleet %s -h printed no usage:\n%s", name, stdout.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := runMain(context.Background(), &stdout, &stderr, []string{"fleet", "rollbak"}); code != 2 {
		t.Fatalf("edgeinfer fleet rollbak: exit %d, want 2", code)
	}
	for name := range fleetCommands {
		if !strings.Contains(stderr.String(), "  "+name+" ") {
			t.Errorf("edgeinfer fleet rollbak: %s missing from the usage:\n%s", name, stderr.String())
		}
	}
}

// TestFleetRollbackUsage: fleet rollback refuses, before connecting, a
// rollback without a rollout id or naming no device.
func TestFleetRollbackUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--devices", "a"}, "--id"},
		{[]string{"--id", "tiny-2"}, "--devices"},
		{[]string{"--id", "tiny-2", "--select", "line"}, "k=v"},
	} {
		args := append([]string{"fleet", "rollback", "--broker", "tcp://127.0.0.1:1", "--fleet", "f"}, tc.args...)
		var stdout, stderr bytes.Buffer
		// Nothing listens on the broker's port: a command that tried to
		// connect would wait for it until the deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		code := runMain(ctx, &stdout, &stderr, args)
		cancel()
		if code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("edgeinfer %s: exit %d, want 2 naming %s:\n%s", strings.Join(args, " "), code, tc.want, stderr.String())
		}
	}
}
