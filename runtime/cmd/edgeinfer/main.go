// Command edgeinfer is the one CLI of the SDK: inspect and run ONNX models,
// build and import decoder bundles, generate text, manage the offline model
// store, quantise, and run the acceptance benchmark.
//
// Each subcommand lives in its own cmd_<name>.go file and registers itself
// from init, so subcommands can be added without touching this file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand. run receives the arguments after its name and
// writes its normal output to stdout; errors are printed by main.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, stdout io.Writer, args []string) error
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("edgeinfer: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// errUsage marks an error caused by bad arguments: exit status 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runMain(ctx, os.Stdout, os.Stderr, os.Args[1:])
	stop()
	os.Exit(code)
}

func runMain(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "edgeinfer: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	if err := c.run(ctx, stdout, args[1:]); err != nil {
		var help *helpRequest
		if errors.As(err, &help) {
			help.print(stdout)
			return 0
		}
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "edgeinfer %s: %v\n", c.name, err)
		if errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "run 'edgeinfer %s -h' for usage\n", c.name)
			return 2
		}
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: edgeinfer <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nrun 'edgeinfer <command> -h' for a command's arguments and flags; 'edgeinfer --version' for versions")
}

// newFlagSet returns a flag set that reports errors instead of exiting, so
// runMain decides the exit status. Parse errors and -h come back from
// parseFlags as errors: runMain prints help on stdout (see cmd_help.go),
// errors on stderr.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("edgeinfer "+name, flag.ContinueOnError)
	fs.Usage = nil // set by a command that writes its own help
	return fs
}

// parseFlags parses args allowing flags after positional arguments
// ("inspect model.onnx --json"), which the standard flag package stops at.
// -h returns a *helpRequest; a bad flag an errUsage error.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	custom := fs.Usage
	fs.Usage = func() {}     // the flag package would print on every error
	fs.SetOutput(io.Discard) // its messages come back in the error instead
	defer func() {
		fs.Usage = custom
		fs.SetOutput(nil)
	}()
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &helpRequest{fs: fs, custom: custom}
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}
