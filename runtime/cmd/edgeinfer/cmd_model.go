package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/bundle/build"
	"github.com/edgeinfer/edgeinfer/pkg/onnx/llama"
	"github.com/edgeinfer/edgeinfer/quant"
)

func init() {
	register(&command{
		name:    "model",
		summary: "build a synthetic decoder bundle (build) or import a Hugging Face checkpoint (import)",
		run:     runModel,
	})
}

const modelUsage = `usage:
  edgeinfer model build --preset NAME --out DIR [--version V] [--contract paged|compatible] [--block-size N] [--all-logits] [--hidden-states] [--kv-int8|--kv-float16] [--portable-attention] [--caller-scatters] [--scheme int4-b32|int8 [--keep lm_head] [--portable-matmul]]
  edgeinfer model import --onnx DIR --out DIR [--name NAME] [--version V]   (an Optimum/GenAI export, run through the compatible contract)
  edgeinfer model import --hf DIR --out DIR [--name NAME] [--version V] [--contract paged|compatible] [--block-size N] [--all-logits] [--hidden-states] [--kv-int8|--kv-float16] [--portable-attention] [--caller-scatters] [--scheme int4-b32|int8 [--keep lm_head] [--portable-matmul]]
presets: `

func runModel(ctx context.Context, stdout io.Writer, args []string) error {
	if len(args) > 0 && isHelpArg(args[0]) {
		fmt.Fprintf(stdout, "%s%s\n", modelUsage, strings.Join(llama.PresetNames(), ", "))
		return nil
	}
	if len(args) == 0 {
		return fmt.Errorf("%w: %s%s", errUsage, modelUsage, strings.Join(llama.PresetNames(), ", "))
	}
	switch args[0] {
	case "build":
		return runModelBuild(ctx, stdout, args[1:])
	case "import":
		return runModelImport(ctx, stdout, args[1:])
	}
	return fmt.Errorf("%w: unknown model subcommand %q\n%s%s", errUsage, args[0], modelUsage, strings.Join(llama.PresetNames(), ", "))
}

// graphFlags are the build options both subcommands take.
type graphFlags struct {
	version    string
	contract   string
	blockSize  int
	allLogits  bool
	kvInt8     bool
	kvFloat16  bool
	portable   bool
	matmul     bool // --matmul-kernel: the default, asked for (an error where the scheme cannot have it)
	portableMM bool
	// --caller-scatters: the graph returns each step's keys and values for
	// the runtime to scatter (llama.Options.CallerScatters)
	callerScatters bool
	hidden         bool // --hidden-states: the output embeddings pool
	// scheme and keep quantise while building (quant.NewEmitter): the
	// weights are quantised one at a time as the builder emits them, so
	// the fp32 model is never held whole.
	scheme string
	keep   []string
}

// register adds the flags both subcommands share.
func (g *graphFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.version, "version", "1", "bundle version (what a fleet publishes and a store keeps apart)")
	fs.StringVar(&g.contract, "contract", string(llama.ContractPaged), "decoder contract: paged or compatible")
	fs.IntVar(&g.blockSize, "block-size", llama.DefaultBlockSize, "paged KV block size (tokens)")
	fs.BoolVar(&g.allLogits, "all-logits", false, "paged graph returns logits of every position")
	fs.BoolVar(&g.hidden, "hidden-states", false, "paged graph also returns every position's final hidden state (hidden_states), which /v1/embeddings and engine.Embed pool")
	fs.BoolVar(&g.kvFloat16, "kv-float16", false, "paged graph reads float16 KV pools (half the float32 KV memory and half the bytes a decode step's attention reads, faster at long contexts: BenchmarkDecodeKVInt8 f16/fp32; llama.cpp's default cache type)")
	fs.BoolVar(&g.kvInt8, "kv-int8", false, "paged graph reads int8 KV pages (one scale per head and block; a quarter of the float32 KV memory, and faster decode: BenchmarkDecodeKVInt8)")
	fs.BoolVar(&g.portable, "portable-attention", false, "paged graph computes attention from standard operators, not edgeinfer's ai.edgeinfer.PagedAttention kernel (for an ONNX Runtime or provider without it; slower on the CPU)")
	fs.BoolVar(&g.portableMM, "portable-matmul", false, "keep the int4-b32/int8 projections on com.microsoft.MatMulNBits (any ONNX Runtime or provider) instead of edgeinfer's faster CPU kernel ai.edgeinfer.MatMulNBits (same weights)")
	fs.BoolVar(&g.callerScatters, "caller-scatters", false, "paged graph returns each step's keys and values (new_keys/new_values) for the runtime to write into the KV pools, instead of its attention writing float32/float16 pools itself: the form SDK releases before graph revision 11 load (build for a fleet with older devices; int8 pools and --portable-attention always have it)")
	fs.BoolVar(&g.matmul, "matmul-kernel", false, "require edgeinfer's ai.edgeinfer.MatMulNBits kernel (the default for --scheme int4-b32 and int8): an error for any other scheme")
	fs.StringVar(&g.scheme, "scheme", "fp32", "weight format: fp32, or quantise while building: int4-b32|int4-b64|int4-b128|int8|int8-pc|fp16 (+ -asym, -accN; int8-pc: per-channel, DynamicQuantizeMatMul)")
	fs.Func("keep", "with --scheme: keep weights whose names contain this fp32 (repeatable, comma-separated; e.g. lm_head, embed)", func(s string) error {
		for _, k := range strings.Split(s, ",") {
			if k = strings.TrimSpace(k); k != "" {
				g.keep = append(g.keep, k)
			}
		}
		return nil
	})
}

func (g *graphFlags) options() (llama.Options, error) {
	c := llama.Contract(g.contract)
	if c != llama.ContractPaged && c != llama.ContractCompatible {
		return llama.Options{}, fmt.Errorf("%w: --contract %q (want paged or compatible)", errUsage, g.contract)
	}
	opts := llama.Options{Contract: c, BlockSize: g.blockSize, AllLogits: g.allLogits, HiddenStates: g.hidden, KVInt8: g.kvInt8, KVFloat16: g.kvFloat16, PortableAttention: g.portable, PortableMatMul: g.portableMM, CallerScatters: g.callerScatters}
	if g.scheme != "" && g.scheme != "fp32" {
		em, err := quant.NewEmitter(g.scheme, g.keep...)
		if err != nil {
			return llama.Options{}, fmt.Errorf("%w: --scheme: %v", errUsage, err)
		}
		opts.Emitter = em
	} else if len(g.keep) > 0 {
		return llama.Options{}, fmt.Errorf("%w: --keep needs --scheme", errUsage)
	}
	if g.matmul && g.portableMM {
		return llama.Options{}, fmt.Errorf("%w: --matmul-kernel and --portable-matmul ask for opposite graphs", errUsage)
	}
	if g.matmul {
		// the kernel runs int4 and int8 block 32 without zero points;
		// anything else would build a graph with nothing on it
		sc, err := quant.ParseScheme(g.scheme)
		if err != nil || (sc.Format != quant.FormatInt4 && sc.Format != quant.FormatInt8) || sc.BlockSize != 32 || sc.Asymmetric || sc.AccuracyLevel != quant.DefaultAccuracyLevel {
			return llama.Options{}, fmt.Errorf("%w: --matmul-kernel needs --scheme int4-b32 or int8 (symmetric, block 32, int8 activations), not %q", errUsage, g.scheme)
		}
	}
	return opts, nil
}

func runModelBuild(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("model build")
	preset := fs.String("preset", "", "synthetic preset: "+strings.Join(llama.PresetNames(), ", "))
	out := fs.String("out", "", "bundle directory to write")
	var g graphFlags
	g.register(fs)
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	if *preset == "" || *out == "" {
		return fmt.Errorf("%w: --preset and --out are required", errUsage)
	}
	opts, err := g.options()
	if err != nil {
		return err
	}
	cfg, src, err := llama.Preset(*preset)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	b, err := build.BuildDecoder(ctx, *out, build.DecoderSpec{
		Name: *preset, Version: g.version, Config: cfg, Weights: src, Options: opts,
		CreatedBy: fmt.Sprintf("edgeinfer model build --preset %s --contract %s --scheme %s", *preset, opts.Contract, g.scheme),
	})
	if err != nil {
		return err
	}
	printBundle(stdout, b)
	return nil
}

func runModelImport(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("model import")
	hf := fs.String("hf", "", "Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json)")
	exported := fs.String("onnx", "", "directory of an exported ONNX model (Optimum / onnxruntime-genai decoder, or a one-shot model) to bundle as it is")
	out := fs.String("out", "", "bundle directory to write")
	name := fs.String("name", "", "bundle name (default: the checkpoint directory's name)")
	var g graphFlags
	g.register(fs)
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, dir := range []string{*hf, *exported} {
		if dir != "" {
			if _, err := needPath(dir); err != nil {
				return err
			}
		}
	}
	if *exported != "" && *out != "" && *hf == "" {
		b, err := build.ImportExported(ctx, *exported, *out, *name, g.version)
		if err != nil {
			return err
		}
		printBundle(stdout, b)
		return nil
	}
	if *hf == "" || *out == "" {
		return fmt.Errorf("%w: --out and one of --hf or --onnx are required", errUsage)
	}
	opts, err := g.options()
	if err != nil {
		return err
	}
	b, err := build.ImportHF(ctx, *hf, *out, build.ImportOptions{Name: *name, Version: g.version, Options: opts})
	if err != nil {
		return err
	}
	printBundle(stdout, b)
	return nil
}

func printBundle(w io.Writer, b *bundle.Bundle) {
	m := b.Manifest
	g := m.Geometry
	if g == nil {
		fmt.Fprintf(w, "bundle %s: %s %s, %s model, %s weights\n", b.Dir, m.Name, m.Version, m.Kind, m.Quantization)
		for _, f := range m.Files {
			fmt.Fprintf(w, "  %-20s %12d B  sha256 %s\n", f.Path, f.Size, f.SHA256)
		}
		return
	}
	fmt.Fprintf(w, "bundle %s: %s %s, contract %s, %s weights\n", b.Dir, m.Name, m.Version, m.Contract, m.Quantization)
	fmt.Fprintf(w, "geometry: layers=%d heads=%d kv_heads=%d head_dim=%d vocab=%d max_positions=%d block_size=%d logits=%s\n",
		g.Layers, g.Heads, g.KVHeads, g.HeadDim, g.Vocab, g.MaxPositions, g.BlockSize, g.Logits)
	for _, f := range m.Files {
		fmt.Fprintf(w, "  %-20s %12d B  sha256 %s\n", f.Path, f.Size, f.SHA256)
	}
}
