package main

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEListsEveryCommand: the README's CLI reference shows every
// registered command and every fleet subcommand in use ("edgeinfer NAME",
// "edgeinfer fleet NAME"), so a command added without its line there
// fails here.
func TestREADMEListsEveryCommand(t *testing.T) {
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for name := range commands {
		if !strings.Contains(readme, "edgeinfer "+name+" ") && !strings.Contains(readme, "edgeinfer --"+name) {
			t.Errorf("README.md shows no use of 'edgeinfer %s'", name)
		}
	}
	for name := range fleetCommands {
		if !strings.Contains(readme, "edgeinfer fleet "+name+" ") {
			t.Errorf("README.md shows no use of 'edgeinfer fleet %s'", name)
		}
	}
}
