package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// synopses are the argument lines of each flag set's help, after
// "edgeinfer ": what the flag defaults alone cannot show (positional
// arguments, which flags go together). A flag set not listed gets
// "NAME [flags]".
var synopses = map[string][]string{
	"run":          {"run [flags] MODEL.onnx"},
	"inspect":      {"inspect [--ops] MODEL.onnx"},
	"generate":     {"generate --model BUNDLE_DIR --prompt TEXT [flags]", "generate --store S --model NAME[@VERSION] --prompt TEXT [flags]"},
	"perplexity":   {"perplexity --model BUNDLE_DIR --text FILE [flags]", "perplexity --store S --model NAME[@VERSION] --text FILE [flags]"},
	"bench":        {"bench --model BUNDLE_DIR (--profile NAME | --spec FILE) [flags]", "bench --store S --model NAME[@VERSION] (--profile NAME | --spec FILE) [flags]"},
	"tokenize":     {"tokenize --tokenizer tokenizer.json [flags] < TEXT", "tokenize --tokenizer tokenizer.json --decode [flags] < IDS.json"},
	"model build":  {"model build --preset NAME --out DIR [flags]"},
	"model import": {"model import --hf CHECKPOINT_DIR --out DIR [flags]", "model import --onnx EXPORT_DIR --out DIR [--name NAME] [--version V]"},
	"plugin run":   {"plugin run PLUGIN.wasm --input [NAME=]FILE [flags]"},
	"version":      {"version"},
}

// isHelpArg reports whether a command's first argument asks for help (for
// commands that read a subcommand before their flags).
func isHelpArg(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// helpRequest is what parseFlags returns for -h: runMain prints it on
// stdout and exits 0 (help that was asked for is output, not an error).
type helpRequest struct {
	fs     *flag.FlagSet
	custom func() // the command's own help, if it set fs.Usage
}

func (h *helpRequest) Error() string { return "help requested" }

func (h *helpRequest) Unwrap() error { return flag.ErrHelp }

func (h *helpRequest) print(w io.Writer) {
	h.fs.SetOutput(w)
	defer h.fs.SetOutput(nil)
	if h.custom != nil {
		h.custom()
		return
	}
	name := strings.TrimPrefix(h.fs.Name(), "edgeinfer ")
	lines := synopses[name]
	if len(lines) == 0 {
		lines = []string{name + " [flags]"}
	}
	fmt.Fprintln(w, "usage:")
	for _, l := range lines {
		fmt.Fprintln(w, "  edgeinfer "+l)
	}
	if c := commands[name]; c != nil {
		fmt.Fprintf(w, "\n%s\n", c.summary)
	}
	hasFlags := false
	h.fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(w, "\nflags:")
		h.fs.PrintDefaults()
	}
}
