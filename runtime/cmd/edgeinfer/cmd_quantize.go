//go:build cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/bundle"
	"github.com/edgeinfer/edgeinfer/pkg/vec"
	"github.com/edgeinfer/edgeinfer/quant"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

func init() {
	register(&command{name: "quantize", summary: "quantise a bundle's or model's weights (int4/int8/fp16) and report the quality cost", run: runQuantize})
}

// defaultHeldout is the tiny trained model's held-out text, used by
// --report when --text is not given and the file exists.
const defaultHeldout = "examples/tinylm/testdata/heldout.txt"

const quantizeUsage = `usage:
  edgeinfer quantize --in BUNDLE_DIR --out BUNDLE_DIR --scheme SCHEME [--keep lm_head] [--report [--text FILE]]
  edgeinfer quantize --in MODEL.onnx --out MODEL.q.onnx --scheme SCHEME [--keep NAME] [--calibrate DIR --report]
  edgeinfer quantize --in MODEL.onnx --out MODEL.int8.onnx --scheme qdq-int8 --calibrate DIR
      [--method minmax|percentile] [--percentile 99.999] [--size 640] [--reduce-range=false] [--report]

schemes: int4-b32, int4-b64, int4-b128, int8 (block 32), fp16;
  suffixes -asym (zero points) and -accN (MatMulNBits accuracy_level, default 4);
  qdq-int8: static int8 QDQ for one-shot models (uint8 activations calibrated on
  DIR's .jpg/.png/.npy, int8 per-channel weights), the form NPUs consume
`

// runQuantize quantises a decoder bundle (graph pass over its model, other
// files copied, quantization.json added, manifest resealed) or a bare ONNX
// file, prints the per-weight table, and with --report scores the result
// against the input on the same tokens.
func runQuantize(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("quantize")
	fs.Usage = func() { fmt.Fprint(fs.Output(), quantizeUsage); fs.PrintDefaults() }
	in := fs.String("in", "", "input bundle directory or .onnx file (fp32)")
	out := fs.String("out", "", "output bundle directory or .onnx file")
	schemeName := fs.String("scheme", "", "int4-b32|int4-b64|int4-b128|int8|int8-pc|fp16 (+ -asym, -accN; int8-pc: per-channel, DynamicQuantizeMatMul)")
	var keep []string
	fs.Func("keep", "keep weights whose names contain this fp32 (repeatable, comma-separated; e.g. lm_head)", func(s string) error {
		for _, k := range strings.Split(s, ",") {
			if k = strings.TrimSpace(k); k != "" {
				keep = append(keep, k)
			}
		}
		return nil
	})
	portable := fs.Bool("portable-matmul", false, "bundles: keep the int4-b32/int8 products on com.microsoft.MatMulNBits (any ONNX Runtime or provider) instead of edgeinfer's faster CPU kernel ai.edgeinfer.MatMulNBits")
	noPad := fs.Bool("no-pad", false, "refuse weights whose K is not a multiple of the block size instead of padding")
	table := fs.Bool("table", false, "print every weight's row, not only the total")
	report := fs.Bool("report", false, "score the quantised bundle against the input (needs ONNX Runtime)")
	textFile := fs.String("text", "", "held-out text for --report (default "+defaultHeldout+" when present; else synthetic token ids)")
	tokens := fs.Int("tokens", 256, "tokens --report scores")
	threads := fs.Int("threads", 2, "ONNX Runtime intra-op threads for --report")
	var one oneShotFlags
	fs.StringVar(&one.calibrate, "calibrate", "", "one-shot models: directory of sample inputs (.jpg/.png resized and normalised, .npy float32)")
	fs.StringVar(&one.method, "method", quant.MethodMinMax, "qdq-int8 calibration: minmax or percentile")
	fs.Float64Var(&one.percentile, "percentile", quant.DefaultPercentile, "qdq-int8 --method percentile: the percentile of each tail kept")
	fs.IntVar(&one.size, "size", 640, "images for symbolic H/W: longer side, sides rounded to multiples of 32")
	fs.IntVar(&one.runs, "runs", 5, "one-shot --report: timed runs per model (p50)")
	fs.BoolVar(&one.reduceRange, "reduce-range", true, "qdq-int8: 7-bit weights, needed by ONNX Runtime's x86 CPU kernels without VNNI (u8·s8 saturates); false for NPUs")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	if *in == "" || *out == "" || *schemeName == "" {
		return fmt.Errorf("%w: --in, --out and --scheme are required\n%s", errUsage, quantizeUsage)
	}
	if *schemeName == quant.QDQScheme {
		return runQuantizeQDQ(ctx, stdout, *in, *out, keep, one, *report, *table, *threads)
	}
	sc, err := quant.ParseScheme(*schemeName)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	sc.PadK = !*noPad
	opts := quant.Options{Scheme: sc, Keep: keep, PortableMatMul: *portable}
	st, err := os.Stat(*in)
	if err != nil {
		return err
	}
	start := time.Now()
	if !st.IsDir() {
		if *report && one.calibrate == "" {
			return fmt.Errorf("%w: --report needs bundles (a decoder's tokenizer and geometry) or, for a .onnx file, --calibrate DIR (sample inputs to compare outputs on)", errUsage)
		}
		// Exporters such as paddle2onnx keep weights in Constant nodes;
		// fold them into initializers first (a temporary copy beside out).
		src := *in
		folded := *out + ".folded.onnx"
		if n, err := quant.FoldConstantsFile(*in, folded); err != nil {
			return err
		} else if n > 0 {
			src = folded
			defer os.Remove(folded)
		}
		res, err := quant.QuantizeFile(ctx, src, *out, opts)
		if err != nil {
			return noOp(stdout, err)
		}
		if err := printQuantized(stdout, res.Scheme, res.Layers, *table, start); err != nil || !*report {
			return err
		}
		_, samples, err := loadOneShotSamples(*in, one)
		if err != nil {
			return err
		}
		return compareOneShot(ctx, stdout, *in, *out, samples, *threads, one.runs)
	}
	qb, side, err := quant.QuantizeBundle(ctx, *in, *out, opts)
	if err != nil {
		return noOp(stdout, err)
	}
	if err := printQuantized(stdout, side.Scheme, side.Layers, *table, start); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "bundle: %s %s@%s (reference %s@%s)\n", qb.Dir, qb.Manifest.Name, qb.Manifest.Version, side.Reference.Name, side.Reference.Version)
	if !*report {
		return nil
	}
	ref, err := bundle.Load(*in)
	if err != nil {
		return err
	}
	q, err := decoderQuality(ctx, ref, qb, *textFile, *tokens, *threads)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "perplexity: reference %.4f quantised %.4f (%+.2f%%)\n", q.PerplexityRef, q.PerplexityQuant, q.PerplexityDeltaPct)
	fmt.Fprintf(stdout, "top1_agreement: %.2f%%\n", q.Top1AgreementPct)
	fmt.Fprintf(stdout, "kl: %.6f\n", q.KL)
	fmt.Fprintf(stdout, "scored: %d positions of %s\n", q.Tokens, q.Text)
	side.Quality = q
	files := make([]string, 0, len(qb.Manifest.Files))
	for _, f := range qb.Manifest.Files {
		files = append(files, f.Path)
	}
	_, err = quant.WriteSidecar(qb.Dir, &ref.Manifest, side, files)
	return err
}

// noOp turns "nothing to quantise" into a clear message and exit status 0:
// the input is already as small as this scheme makes it, which is not a
// failure of the command.
func noOp(stdout io.Writer, err error) error {
	if errors.Is(err, quant.ErrNothingToQuantize) {
		fmt.Fprintf(stdout, "nothing to quantise, nothing written: %v\n", err)
		return nil
	}
	return err
}

func printQuantized(w io.Writer, scheme string, layers []quant.Layer, all bool, start time.Time) error {
	if all {
		if err := quant.WriteTable(w, layers); err != nil {
			return err
		}
	}
	before, after, n := quant.Totals(layers)
	var worst quant.Layer
	for _, l := range layers {
		if l.RelRMS > worst.RelRMS {
			worst = l
		}
	}
	fmt.Fprintf(w, "scheme: %s\n", scheme)
	fmt.Fprintf(w, "weights: %d quantised of %d; %d → %d bytes (%.3f×); worst rel rms %.4f (%s)\n",
		n, len(layers), before, after, float64(after)/float64(max(before, 1)), worst.RelRMS, worst.Name)
	fmt.Fprintf(w, "time: %.2f s; peak rss %.1f MiB\n", time.Since(start).Seconds(), peakRSSMiB())
	return nil
}

// peakRSSMiB is this process's maximum resident set (getrusage), or NaN
// where the platform does not report it.
func peakRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return math.NaN()
	}
	if runtime.GOOS == "darwin" {
		return float64(ru.Maxrss) / (1 << 20) // bytes there
	}
	return float64(ru.Maxrss) / 1024 // KiB on Linux
}

// decoderQuality scores the same tokens on both bundles: perplexity of each,
// top-1 agreement of the greedy next token, and the mean KL(ref ‖ quant)
// over positions. The reference runs first and its log-probabilities are
// kept, so only one session spins at a time.
func decoderQuality(ctx context.Context, ref, qb *bundle.Bundle, textFile string, n, threads int) (*quant.Quality, error) {
	if ref.Manifest.Kind != bundle.KindDecoder {
		return nil, fmt.Errorf("%w: --report handles decoder bundles; %s is %s", errUsage, ref.Dir, ref.Manifest.Kind)
	}
	toks, desc, err := reportTokens(ref, textFile, n)
	if err != nil {
		return nil, err
	}
	refLP, err := positionLogProbs(ctx, ref, toks, threads)
	if err != nil {
		return nil, err
	}
	qLP, err := positionLogProbs(ctx, qb, toks, threads)
	if err != nil {
		return nil, err
	}
	var nllR, nllQ, kl float64
	agree := 0
	for p := range refLP {
		r, q := refLP[p], qLP[p]
		nllR -= float64(r[toks[p+1]])
		nllQ -= float64(q[toks[p+1]])
		if vec.Argmax(r) == vec.Argmax(q) {
			agree++
		}
		for i, lr := range r {
			kl += math.Exp(float64(lr)) * (float64(lr) - float64(q[i]))
		}
	}
	m := float64(len(refLP))
	pr, pq := math.Exp(nllR/m), math.Exp(nllQ/m)
	return &quant.Quality{Text: desc, Tokens: len(refLP), PerplexityRef: pr, PerplexityQuant: pq,
		PerplexityDeltaPct: 100 * (pq/pr - 1), Top1AgreementPct: 100 * float64(agree) / m, KL: kl / m}, nil
}

// reportTokens picks the scored tokens: the text (or the default held-out
// file) through the bundle's tokenizer, else deterministic pseudo-random ids
// (a random-weight preset has no text it models better than noise).
func reportTokens(b *bundle.Bundle, textFile string, n int) ([]int32, string, error) {
	if textFile == "" {
		if _, err := os.Stat(defaultHeldout); err == nil && b.TokenizerPath() != "" {
			textFile = defaultHeldout
		}
	}
	maxPos := b.Manifest.Geometry.MaxPositions
	n = max(min(n, maxPos-1), 2)
	if textFile == "" {
		vocab := b.Manifest.Geometry.Vocab
		toks := make([]int32, n)
		x := uint64(0x9e3779b97f4a7c15)
		for i := range toks {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			toks[i] = int32(x % uint64(vocab))
		}
		return toks, "synthetic token ids (no --text, no tokenizer text)", nil
	}
	if b.TokenizerPath() == "" {
		return nil, "", fmt.Errorf("%w: --text needs a bundle with tokenizer.json", errUsage)
	}
	text, err := os.ReadFile(textFile)
	if err != nil {
		return nil, "", err
	}
	tok, err := tokenizer.Load(b.TokenizerPath())
	if err != nil {
		return nil, "", err
	}
	ids := tok.Encode(string(text))
	if len(ids) < 2 {
		return nil, "", fmt.Errorf("%s: too little text to score", textFile)
	}
	toks := make([]int32, 0, n)
	for _, id := range ids[:min(n, len(ids))] {
		toks = append(toks, int32(id))
	}
	return toks, textFile, nil
}

// positionLogProbs returns log-softmax of the logits after each prefix
// toks[:p+1], p < len(toks)−1. The paged graph returns one position's
// logits per row, so each prefix is one greedy Generate step of one token;
// the prefix cache keeps every full block, so a step recomputes at most one
// block.
func positionLogProbs(ctx context.Context, b *bundle.Bundle, toks []int32, threads int) ([][]float32, error) {
	m, err := engine.OpenScorer(ctx, engine.ModelSpec{Dir: b.Dir}, engine.ScorerOptions{Session: ort.Options{IntraOpThreads: threads}})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	out := make([][]float32, 0, len(toks)-1)
	for p := 0; p+1 < len(toks); p++ {
		// The step's logits stay readable after the loop (until the next
		// step), also when the greedy token was EOS and nothing was yielded.
		for _, err := range m.Greedy(ctx, toks[:p+1], 1) {
			if err != nil {
				return nil, err
			}
		}
		if n := len(m.Logits()); n != b.Manifest.Geometry.Vocab {
			return nil, fmt.Errorf("%s: %d logits at position %d, want %d", b.Manifest.Name, n, p, b.Manifest.Geometry.Vocab)
		}
		out = append(out, m.LogProbs())
	}
	return out, m.Close()
}
