package llama

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// BenchmarkDecodeStepPagedVsCompatible measures one decode step of
// synthetic-110m fp32 in both contracts at batch 1 and 8, context 128, 512
// and 2048, two intra-op threads, through runtime/ort Bindings (inputs
// bound once, outputs pre-allocated; the paged graph writes the step's
// keys and values into its pools itself). It reports each shape's paged ÷ compatible step time as a
// metric (it builds a 480 MB model twice: one iteration is the run).
//
//	go test ./pkg/onnx/llama -run XX -bench DecodeStepPagedVsCompatible -benchtime 1x
func BenchmarkDecodeStepPagedVsCompatible(b *testing.B) {
	t := b
	orttest.Need(t)
	ctx := context.Background()
	c, src, err := Preset("synthetic-110m")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sessions := map[Contract]*ort.Session{}
	for _, contract := range []Contract{ContractPaged, ContractCompatible} {
		d := filepath.Join(dir, string(contract))
		if _, err := WriteModel(ctx, d, c, src, Options{Contract: contract}); err != nil {
			t.Fatal(err)
		}
		s, err := ort.NewSessionFromFile(ctx, filepath.Join(d, ModelFile), ort.Options{IntraOpThreads: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sessions[contract] = s
	}
	const bs = DefaultBlockSize
	hkv, hd, V := int64(c.NumKeyValueHeads), int64(c.HeadDim), int64(c.VocabSize)
	for _, B := range []int64{1, 8} {
		for _, ctxLen := range []int64{128, 512, 2048} {
			var tensors []*ort.Tensor
			mk := func(x *ort.Tensor, err error) *ort.Tensor {
				if err != nil {
					t.Fatal(err)
				}
				tensors = append(tensors, x)
				return x
			}
			ids := make([]int64, B)
			pos := slices.Repeat([]int64{ctxLen}, int(B))
			// paged: one pool of B·ctx/bs+1 blocks, each row its own blocks
			mb := ctxLen/bs + 1
			nb := B * mb
			table := make([]int64, B*mb)
			for i := range table {
				table[i] = int64(i)
			}
			in := map[string]*ort.Tensor{
				"input_ids":    mk(ort.CopyTensor([]int64{B, 1}, ids)),
				"position_ids": mk(ort.CopyTensor([]int64{B, 1}, pos)),
				"block_tables": mk(ort.CopyTensor([]int64{B, mb}, table)),
				"context_lens": mk(ort.CopyTensor([]int64{B}, pos)),
				"last_index":   mk(ort.CopyTensor([]int64{B}, make([]int64, B))),
			}
			out := map[string]*ort.Tensor{"logits": mk(ort.NewEmptyTensor(ort.Float32, []int64{B, V}))}
			for i := range c.NumHiddenLayers {
				li := strconv.Itoa(i)
				for _, k := range []string{"key_cache.", "value_cache."} {
					in[k+li] = mk(ort.NewEmptyTensor(ort.Float32, []int64{hkv, nb, bs, hd}))
				}
			}
			// the kernel's attention writes the pools at slots: row b's next
			// position ctxLen lies in its block ctxLen/bs
			slots := make([]int64, B)
			for b := range B {
				slots[b] = table[b*mb+ctxLen/bs]*bs + ctxLen%bs
			}
			in["slots"] = mk(ort.CopyTensor([]int64{B, 1}, slots))
			pagedMs := timeSteps(t, sessions[ContractPaged], in, out)

			mask := slices.Repeat([]int64{1}, int(B*(ctxLen+1)))
			in = map[string]*ort.Tensor{
				"input_ids":      mk(ort.CopyTensor([]int64{B, 1}, ids)),
				"position_ids":   mk(ort.CopyTensor([]int64{B, 1}, pos)),
				"attention_mask": mk(ort.CopyTensor([]int64{B, ctxLen + 1}, mask)),
			}
			out = map[string]*ort.Tensor{"logits": mk(ort.NewEmptyTensor(ort.Float32, []int64{B, 1, V}))}
			for i := range c.NumHiddenLayers {
				li := strconv.Itoa(i)
				for _, k := range []string{".key", ".value"} {
					in["past_key_values."+li+k] = mk(ort.NewEmptyTensor(ort.Float32, []int64{B, hkv, ctxLen, hd}))
					out["present."+li+k] = mk(ort.NewEmptyTensor(ort.Float32, []int64{B, hkv, ctxLen + 1, hd}))
				}
			}
			compatMs := timeSteps(t, sessions[ContractCompatible], in, out)
			t.Logf("B=%d ctx=%4d: paged %6.2f ms  compatible %6.2f ms  (paged/compatible %.2f)",
				B, ctxLen, pagedMs, compatMs, pagedMs/compatMs)
			t.ReportMetric(pagedMs/compatMs, "paged/compat_B"+strconv.FormatInt(B, 10)+"_ctx"+strconv.FormatInt(ctxLen, 10))
			for _, x := range tensors {
				x.Close()
			}
		}
	}
}

// timeSteps returns the median of 15 timed runs after 3 warm-ups.
func timeSteps(t testing.TB, s *ort.Session, in, out map[string]*ort.Tensor) float64 {
	t.Helper()
	b, err := s.Bind(in, out)
	if err != nil {
		t.Fatal(err)
	}
	var times []float64
	for i := range 18 {
		start := time.Now()
		if err := b.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if i >= 3 {
			times = append(times, float64(time.Since(start).Microseconds())/1000)
		}
	}
	slices.Sort(times)
	return times[len(times)/2]
}
