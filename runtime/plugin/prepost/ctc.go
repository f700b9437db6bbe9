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
	best := make([]int32, T)
	val := make([]float32, T)
	ArgmaxRows(probs[:T*C], C, best, val)
	return CTCCollapse(best, val, charset)
}

// ArgmaxRows writes, for each row of C values in m, the first index of its
// largest value and that value (so a NaN first is kept) to best and val.
func ArgmaxRows(m []float32, C int, best []int32, val []float32) {
	for t := range len(m) / C {
		row := m[t*C : (t+1)*C]
		b, bv := 0, row[0]
		for c, v := range row {
			if v > bv {
				b, bv = c, v
			}
		}
		best[t], val[t] = int32(b), bv
	}
}

// CTCCollapse is CTCGreedy's second half, for a caller that has each
// step's best class and its probability already (a plugin gets them from
// the host's argmax): repeats collapsed, blanks (class 0) dropped, the
// kept classes spelt from charset.
func CTCCollapse(best []int32, val []float32, charset []string) CTCResult {
	var b strings.Builder
	var res CTCResult
	var sum float64
	prev := int32(-1)
	for t, c := range best {
		if c != 0 && c != prev {
			res.Indices = append(res.Indices, c)
			sum += float64(val[t])
			if c >= 0 && int(c) < len(charset) {
				b.WriteString(charset[c])
			}
		}
		prev = c
	}
	res.Text = b.String()
	if len(res.Indices) > 0 {
		res.Score = sum / float64(len(res.Indices))
	}
	return res
}
