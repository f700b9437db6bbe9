package llama

import (
	"strconv"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"
)

func argmax(x []float32) int64 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int64(best)
}

// TestContractsAgree runs a 64-token prompt and 32 greedy steps through the
// paged graph (with a Go-side pool), in both attention forms, and the
// compatible graph (feeding present back as past): the logits must agree at
// every step, and the cached decode must equal full recomputation by the
// reference.
func TestContractsAgree(t *testing.T) {
	orttest.Need(t)
	c, src := tinyModel(t)
	const prompt, steps, bs = 64, 32, 16
	pagedForms := []*ort.Session{
		newSession(t, c, src, Options{BlockSize: bs}),
		newSession(t, c, src, Options{BlockSize: bs, PortableAttention: true}),
	}
	pools := []*pool{newPool(c, 8, bs), newPool(c, 8, bs)}
	compat := newSession(t, c, src, Options{Contract: ContractCompatible})
	ids := randomIDs(7, prompt, c.VocabSize)
	table := []int64{5, 1, 6, 3, 0, 7}
	hkv, d := int64(c.NumKeyValueHeads), int64(c.HeadDim)
	past := map[string]outTensor{}
	for i := range c.NumHiddenLayers {
		for _, kind := range []string{".key", ".value"} {
			past["present."+strconv.Itoa(i)+kind] = outTensor{shape: []int64{1, hkv, 0, d}}
		}
	}
	V := c.VocabSize
	var worst float64
	for step := 0; step <= steps; step++ {
		from, n := len(ids)-1, 1
		if step == 0 {
			from, n = 0, prompt
		}
		var pagedLogits [][]float32
		for i, paged := range pagedForms {
			r := newRunner(t)
			set(r, "input_ids", []int64{1, int64(n)}, ids[from:from+n])
			set(r, "position_ids", []int64{1, int64(n)}, iota64(from, n))
			set(r, "block_tables", []int64{1, int64(len(table))}, table)
			set(r, "context_lens", []int64{1}, []int64{int64(from)})
			set(r, "last_index", []int64{1}, []int64{int64(n - 1)})
			pools[i].feed(r)
			pools[i].slots(r, paged, [][]int64{table}, []int{from}, n)
			po := r.run(paged)
			pools[i].scatter(po, 0, n, from, table)
			pagedLogits = append(pagedLogits, po["logits"].data)
		}

		r := newRunner(t)
		set(r, "input_ids", []int64{1, int64(n)}, ids[from:from+n])
		set(r, "attention_mask", []int64{1, int64(from + n)}, onesI64(from+n))
		set(r, "position_ids", []int64{1, int64(n)}, iota64(from, n))
		for i := range c.NumHiddenLayers {
			for _, kind := range []string{".key", ".value"} {
				pt := past["present."+strconv.Itoa(i)+kind]
				set(r, "past_key_values."+strconv.Itoa(i)+kind, pt.shape, pt.data)
			}
		}
		co := r.run(compat)
		past = co
		cl := co["logits"].data[(n-1)*V : n*V]
		for i, form := range []string{"kernel", "portable"} {
			diff := maxDiff(pagedLogits[i], cl)
			worst = max(worst, diff)
			if diff > tolerance {
				t.Fatalf("step %d: paged (%s attention) and compatible logits differ by %g", step, form, diff)
			}
		}
		ids = append(ids, argmax(cl))
	}
	ref := refForward(c, src, ids[:len(ids)-1])
	// The last greedy token came from the logits of the last position.
	for i := prompt - 1; i < len(ids)-1; i++ {
		if got := argmax(ref[i]); got != ids[i+1] {
			t.Fatalf("position %d: reference picks %d, cached decode picked %d", i, got, ids[i+1])
		}
	}
	t.Logf("64-token prompt + %d greedy steps: max |paged − compatible| = %.2g", steps, worst)
}

// TestKernelDomain: the graph names edgeinfer's operators in the domain
// runtime/ort registers them under (the two packages cannot share the
// constant: ort stays free of the ONNX builder).
func TestKernelDomain(t *testing.T) {
	if onnx.DomainEdgeInfer != ort.OpDomain {
		t.Fatalf("builder domain %q, runtime domain %q", onnx.DomainEdgeInfer, ort.OpDomain)
	}
}
