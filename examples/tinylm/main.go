// Command tinylm loads the tiny Llama trained on Moby-Dick in this directory
// (model.safetensors, config.json, tokenizer.json; see README.md and
// train.py) through pkg/safetensors, checks every tensor against the
// config, and prints the configuration and parameter count. With --prompt
// it continues the text with a plain-Go reference forward pass (no ONNX
// Runtime, no KV cache: slow, but the readable specification the ONNX graph
// builder is tested against); with --perplexity it scores a text file by
// the protocol in golden.json.
//
//	go run ./examples/tinylm
//	go run ./examples/tinylm --prompt "Call me Ishmael" --tokens 40
//	go run ./examples/tinylm --perplexity examples/tinylm/testdata/heldout.txt
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Stdout, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tinylm:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("tinylm", flag.ContinueOnError)
	dir := fs.String("dir", "examples/tinylm", "checkpoint directory")
	prompt := fs.String("prompt", "", "text to continue")
	tokens := fs.Int("tokens", 40, "tokens to generate after --prompt")
	temp := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	seed := fs.Uint64("seed", 1, "sampling seed")
	ppl := fs.String("perplexity", "", "text file to score (non-overlapping 256-token windows)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m, err := Load(*dir)
	if err != nil {
		return err
	}
	defer m.Close()
	c := m.Config
	fmt.Fprintf(w, "LlamaForCausalLM: vocab %d, hidden %d, layers %d, heads %d (kv %d), head_dim %d, ffn %d, ctx %d, rope_theta %g, rms_norm_eps %g, tied %v\n",
		c.VocabSize, c.HiddenSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim,
		c.IntermediateSize, c.MaxPositionEmbeddings, c.RopeTheta, c.RMSNormEps, c.TieWordEmbeddings)
	fmt.Fprintf(w, "parameters: %d (%.1f MB as float32)\n", m.Params, float64(m.Params)*4/1e6)
	if *prompt == "" && *ppl == "" {
		return nil
	}
	tk, err := tokenizer.Load(filepath.Join(*dir, "tokenizer.json"))
	if err != nil {
		return err
	}
	if *ppl != "" {
		text, err := os.ReadFile(*ppl)
		if err != nil {
			return err
		}
		nll, n, err := m.WindowNLL(ctx, tk.Encode(string(text)), 256)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "perplexity: %.4f (mean NLL %.6f over %d predicted tokens)\n", math.Exp(nll/float64(n)), nll/float64(n), n)
	}
	if *prompt != "" {
		ids := tk.Encode(*prompt)
		rng := rand.New(rand.NewPCG(*seed, 0))
		fmt.Fprint(w, *prompt)
		dec := tk.NewStreamDecoder()
		for _, id := range ids {
			dec.Add(id)
		}
		for range *tokens {
			if err := ctx.Err(); err != nil {
				return err
			}
			if len(ids) >= c.MaxPositionEmbeddings {
				break
			}
			logits := m.Forward(ids)
			id := pick(logits[len(logits)-1], *temp, rng)
			if id == c.EOSTokenID {
				break
			}
			ids = append(ids, id)
			s, err := dec.Add(id)
			if err != nil {
				return err
			}
			fmt.Fprint(w, s)
		}
		fmt.Fprintln(w, dec.Flush())
	}
	return nil
}

// pick returns the argmax at temperature 0, else a sample from the
// tempered softmax.
func pick(logits []float32, temp float64, rng *rand.Rand) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	if temp <= 0 {
		return best
	}
	p := make([]float64, len(logits))
	var sum float64
	for i, v := range logits {
		p[i] = math.Exp((float64(v) - float64(logits[best])) / temp)
		sum += p[i]
	}
	r := rng.Float64() * sum
	for i, v := range p {
		if r -= v; r <= 0 {
			return i
		}
	}
	return best
}

// WindowNLL scores ids by golden.json's protocol: non-overlapping windows
// of `window` tokens, each run alone from position 0, summing the NLL of
// tokens 1..len-1 of each window. It returns the sum and the count.
func (m *Model) WindowNLL(ctx context.Context, ids []int, window int) (float64, int, error) {
	var total float64
	n := 0
	for s := 0; s < len(ids); s += window {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		win := ids[s:min(s+window, len(ids))]
		if len(win) < 2 {
			continue
		}
		logits := m.Forward(win)
		for t := 0; t+1 < len(win); t++ {
			total += nll(logits[t], win[t+1])
			n++
		}
	}
	if n == 0 {
		return 0, 0, errors.New("no tokens to score")
	}
	return total, n, nil
}

// nll is −log softmax(logits)[target], computed in float64.
func nll(logits []float32, target int) float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return math.Log(sum) + mx - float64(logits[target])
}
