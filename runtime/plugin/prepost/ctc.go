package prepost

import (
	"strings"
)

// CTCResult is one decoded sequence.
type CTCResult struct {
	Text string
	// Score is the mean probability of the kept characters (0 when none).
	Score float64
	// Indices are the kept class indices (1-based into the dictionary).
	Indices []int32
}

// PaddleCharset is PaddleOCR's class list for a dictionary file's
// contents: "blank" first, one class per line, and a space last
// (use_space_char), 6625 classes for ppocr_keys_v1.txt.
func PaddleCharset(dict string) []string {
	lines := strings.Split(strings.TrimRight(dict, "\n"), "\n")
	out := make([]string, 0, len(lines)+2)
	out = append(out, "")
	for _, l := range lines {
		out = append(out, strings.TrimRight(l, "\r"))
	}
	return append(out, " ")
}

// CTCGreedy decodes a [T, C] matrix of per-step class probabilities
// (PaddleOCR's recogniser ends in a softmax): the best class per step,
// repeats collapsed, blanks (class 0) dropped.
func CTCGreedy(probs []float32, T, C int, charset []string) CTCResult {
	var b strings.Builder
	var res CTCResult
	var sum float64
	prev := -1
	for t := range T {
		row := probs[t*C : (t+1)*C]
		best, bv := 0, row[0]
		for c, v := range row {
			if v > bv {
				best, bv = c, v
			}
		}
		if best != 0 && best != prev {
			res.Indices = append(res.Indices, int32(best))
			sum += float64(bv)
			if best < len(charset) {
				b.WriteString(charset[best])
			}
		}
		prev = best
	}
	res.Text = b.String()
	if len(res.Indices) > 0 {
		res.Score = sum / float64(len(res.Indices))
	}
	return res
}
