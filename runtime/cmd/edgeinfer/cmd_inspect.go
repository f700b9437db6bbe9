package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

func init() {
	register(&command{
		name:    "inspect",
		summary: "show an ONNX model's inputs, outputs, opsets and parameter bytes",
		run:     runInspect,
	})
}

// runInspect reads the model with pkg/onnx only: it needs no ONNX Runtime
// library, so it works on a build machine for any target.
func runInspect(_ context.Context, w io.Writer, args []string) error {
	fs := newFlagSet("inspect")
	ops := fs.Bool("ops", false, "also print the operator histogram")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: inspect MODEL.onnx", errUsage)
	}
	if err := needFile(pos[0]); err != nil {
		return err
	}
	data, err := os.ReadFile(pos[0])
	if err != nil {
		return err
	}
	r, err := onnx.Inspect(data)
	if err != nil {
		return fmt.Errorf("%s: %w", pos[0], err)
	}
	fmt.Fprintf(w, "model: %s (%s)\n", pos[0], byteSize(int64(len(data))))
	fmt.Fprintf(w, "ir version: %d  producer: %s %s\n", r.IRVersion, r.ProducerName, r.ProducerVersion)
	var opsets []string
	for _, o := range r.Opsets {
		d := o.Domain
		if d == "" {
			d = "ai.onnx"
		}
		opsets = append(opsets, fmt.Sprintf("%s %d", d, o.Version))
	}
	fmt.Fprintf(w, "opsets: %s\n", strings.Join(opsets, ", "))
	fmt.Fprintln(w, "inputs:")
	for _, v := range r.Inputs {
		fmt.Fprintf(w, "  %-24s %s[%s]\n", v.Name, v.Type, strings.Join(v.Shape, ","))
	}
	fmt.Fprintln(w, "outputs:")
	for _, v := range r.Outputs {
		fmt.Fprintf(w, "  %-24s %s[%s]\n", v.Name, v.Type, strings.Join(v.Shape, ","))
	}
	fmt.Fprintf(w, "parameters: %d in %d initializers, %s", r.Params, len(r.Initializers), byteSize(r.Bytes))
	if r.ExternalBytes > 0 {
		fmt.Fprintf(w, " (%s in external files)", byteSize(r.ExternalBytes))
	}
	fmt.Fprintf(w, "\nnodes: %d\n", r.Nodes)
	if *ops {
		for _, c := range r.OpHistogram() {
			fmt.Fprintf(w, "  %-24s %d\n", c.Op, c.Count)
		}
	}
	for k, v := range r.Metadata {
		fmt.Fprintf(w, "metadata: %s = %s\n", k, v)
	}
	return nil
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
