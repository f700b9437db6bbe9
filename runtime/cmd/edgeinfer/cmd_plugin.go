package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/plugin"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

func init() {
	register(&command{
		name:    "plugin",
		summary: "run a sandboxed pre/post-processing plugin (.wasm) on a file: plugin run PLUGIN.wasm --input FILE",
		run:     runPlugin,
	})
}

func runPlugin(ctx context.Context, w io.Writer, args []string) error {
	if len(args) > 0 && isHelpArg(args[0]) {
		args = append([]string{"run"}, args...) // its one subcommand's help
	}
	if len(args) == 0 || args[0] != "run" {
		return fmt.Errorf("%w: plugin run PLUGIN.wasm --input [NAME=]FILE [--arg key=value] [--dir HOST:GUEST] [--timeout D] [--start-timeout D] [--memory-mb N]", errUsage)
	}
	fs := newFlagSet("plugin run")
	var inputs, argv, dirs multiFlag
	fs.Var(&inputs, "input", "[NAME=]FILE: the file's bytes as a uint8 tensor NAME (default \"image\"); repeatable")
	fs.Var(&argv, "arg", "key=value: a plugin argument (string tensor arg.<key>); repeatable")
	fs.Var(&dirs, "dir", "HOST:GUEST: mount a host directory read-only at GUEST; repeatable")
	timeout := fs.Duration("timeout", 2*time.Second, "limit of the call")
	memMB := fs.Int("memory-mb", 64, "memory cap of the plugin in MiB")
	startTimeout := fs.Duration("start-timeout", 5*time.Second, "limit of the plugin's start (its _initialize)")
	engine := fs.String("engine", "", "wazero engine: compiler or interpreter (default: compiler where supported)")
	clock := fs.Bool("clock", false, "grant the host clock")
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 || len(inputs) == 0 {
		return fmt.Errorf("%w: plugin run PLUGIN.wasm --input [NAME=]FILE", errUsage)
	}
	cfg := plugin.Config{Engine: *engine, MemoryMB: *memMB, CallTimeout: *timeout, StartTimeout: *startTimeout, MaxInstances: 1, Grants: plugin.Grants{Clock: *clock}}
	for _, d := range dirs {
		host, guest, ok := strings.Cut(d, ":")
		if !ok {
			return fmt.Errorf("%w: --dir %q: want HOST:GUEST", errUsage, d)
		}
		if host, err = filepath.Abs(host); err != nil {
			return err
		}
		cfg.Grants.Dirs = append(cfg.Grants.Dirs, plugin.Mount{Host: host, Guest: guest})
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var in []abi.Tensor
	for _, spec := range inputs {
		name, file, ok := strings.Cut(spec, "=")
		if !ok {
			name, file = "image", spec
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		in = append(in, abi.Bytes(name, b))
	}
	for _, a := range argv {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%w: --arg %q: want key=value", errUsage, a)
		}
		in = append(in, abi.Str("arg."+k, v))
	}
	p, err := plugin.LoadFile(ctx, pos[0], cfg)
	if err != nil {
		return err
	}
	defer p.Close(context.WithoutCancel(ctx))
	info := p.Info()
	fmt.Fprintf(w, "plugin: %s sha256 %s\nwazero %s, %s; compile %.1f ms, start %.1f ms, memory %d KiB\n",
		pos[0], info.SHA256[:16], info.Wazero, info.Engine, ms(info.Compile), ms(info.Instantiate), info.InstanceMemory>>10)
	start := time.Now()
	out, err := p.Call(ctx, in)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "call: %.2f ms\n", ms(time.Since(start)))
	printTensors(w, "output", out)
	return nil
}

// printTensors writes each tensor's type, shape and first values.
func printTensors(w io.Writer, label string, ts []abi.Tensor) {
	for _, t := range ts {
		fmt.Fprintf(w, "%s %s: %s%v %s\n", label, t.Name, t.DType, t.Shape, previewABI(t))
	}
}

func previewABI(t abi.Tensor) string {
	const n = 10
	var vals []string
	switch t.DType {
	case abi.String:
		s, _ := t.Text()
		if len(s) > 200 {
			s = s[:200] + "…"
		}
		return fmt.Sprintf("%q", s)
	case abi.Float32:
		v, _ := t.Float32s()
		for _, x := range v[:min(n, len(v))] {
			vals = append(vals, fmt.Sprintf("%.4g", x))
		}
	case abi.Int64:
		v, _ := t.Int64s()
		for _, x := range v[:min(n, len(v))] {
			vals = append(vals, fmt.Sprint(x))
		}
	case abi.Int32:
		v, _ := t.Int32s()
		for _, x := range v[:min(n, len(v))] {
			vals = append(vals, fmt.Sprint(x))
		}
	case abi.Float64:
		v, _ := t.Float64s()
		for _, x := range v[:min(n, len(v))] {
			vals = append(vals, fmt.Sprintf("%.6g", x))
		}
	default:
		return fmt.Sprintf("(%d bytes)", len(t.Data))
	}
	more := ""
	if t.Elements() > n {
		more = " …"
	}
	return "[" + strings.Join(vals, " ") + more + "]"
}
