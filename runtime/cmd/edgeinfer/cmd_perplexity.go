//go:build cgo

package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// runPerplexity scores a text in non-overlapping windows: each window of
// --window tokens predicts its tokens 2..n from their prefixes, and the
// perplexity is exp(total NLL ÷ predicted tokens). This is the protocol the
// tiny model's training script reports, so the two figures are comparable.
func runPerplexity(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("perplexity")
	var mf modelFlags
	mf.register(fs)
	textFile := fs.String("text", "", "UTF-8 text file to score")
	window := fs.Int("window", 256, "tokens per window (non-overlapping)")
	bos := fs.Bool("bos", false, "prepend the tokenizer's BOS to every window")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := mf.validate(); err != nil {
		return err
	}
	if *textFile == "" || *window < 2 {
		return fmt.Errorf("%w: --text FILE and --window ≥ 2 are required", errUsage)
	}
	text, err := os.ReadFile(*textFile)
	if err != nil {
		return err
	}
	m, err := engine.OpenScorer(ctx, mf.spec(), engine.ScorerOptions{
		Session: ort.Options{IntraOpThreads: mf.threads},
		KV:      engine.KVOptions{DisablePrefixCache: true}, // windows share no prefix
		Store:   mf.store,
	})
	if err != nil {
		return err
	}
	defer m.Close()
	tok := m.Tokenizer()
	if tok == nil {
		return fmt.Errorf("%s has no tokenizer.json", mf.model)
	}
	ids := tok.Encode(string(text))
	w := min(*window, m.MaxPositions())
	start := time.Now()
	var nll float64
	var n int
	for off := 0; off+1 < len(ids); off += w {
		win := make([]int32, 0, w+1)
		if id, ok := tok.BOS(); ok && *bos {
			win = append(win, int32(id))
		}
		for _, id := range ids[off:min(off+w, len(ids))] {
			win = append(win, int32(id))
		}
		s, k, err := m.Score(ctx, win)
		if err != nil {
			return err
		}
		nll += s
		n += k
	}
	if n == 0 {
		return fmt.Errorf("%s: too little text to score", *textFile)
	}
	el := time.Since(start)
	fmt.Fprintf(stdout, "perplexity: %.4f\n", math.Exp(nll/float64(n)))
	fmt.Fprintf(stdout, "tokens: %d predicted in windows of %d; mean nll %.5f nats; %.0f tok/s\n", n, w, nll/float64(n), float64(n)/el.Seconds())
	return nil
}
