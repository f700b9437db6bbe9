package quant

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Layer is one row of the per-weight table: what a weight became, what it
// cost and how far its reconstruction is from the original.
type Layer struct {
	// Name is the weight's name (initializer or Hugging Face name).
	Name string `json:"name"`
	// Shape is the weight as MatMulNBits sees it: [N, K].
	Shape []int `json:"shape"`
	// Format is the scheme it was stored in, or "fp32 (kept)".
	Format      string `json:"format"`
	BytesBefore int64  `json:"bytes_before"`
	BytesAfter  int64  `json:"bytes_after"`
	// RelRMS is ‖dequantised − original‖ / ‖original‖.
	RelRMS float64 `json:"rel_rms"`
}

// Totals sums a table: bytes before and after, and the weight count quantised.
func Totals(layers []Layer) (before, after int64, quantised int) {
	for _, l := range layers {
		before += l.BytesBefore
		after += l.BytesAfter
		if !strings.HasSuffix(l.Format, "(kept)") {
			quantised++
		}
	}
	return before, after, quantised
}

// WriteTable prints layers as an aligned text table with a total row.
func WriteTable(w io.Writer, layers []Layer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "weight\tshape [N,K]\tformat\tbytes before\tbytes after\trel rms\t")
	for _, l := range layers {
		fmt.Fprintf(tw, "%s\t%v\t%s\t%d\t%d\t%.4f\t\n", l.Name, l.Shape, l.Format, l.BytesBefore, l.BytesAfter, l.RelRMS)
	}
	before, after, n := Totals(layers)
	ratio := 0.0
	if before > 0 {
		ratio = float64(after) / float64(before)
	}
	fmt.Fprintf(tw, "total (%d quantised)\t\t\t%d\t%d\t%.3f×\t\n", n, before, after, ratio)
	return tw.Flush()
}

// keepMatch reports whether name contains one of the keep patterns
// ("lm_head", "embed_tokens", "embed" …).
func keepMatch(name string, keep []string) bool {
	for _, k := range keep {
		if k != "" && strings.Contains(name, k) {
			return true
		}
	}
	return false
}
