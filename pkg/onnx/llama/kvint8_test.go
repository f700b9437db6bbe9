package llama

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/ort"
	"github.com/edgeinfer/edgeinfer/runtime/ort/orttest"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

// The int8 graph reads q × scale[head, block]: fed int8 pools and scales,
// it must give what the fp32 graph gives on the dequantised pools — the
// same float32 products, so the logits and new K/V agree to rounding. The
// fp32 side is the portable graph, the int8 side both the kernel's and the
// portable one.
func TestKVInt8MatchesDequantisedPools(t *testing.T) {
	reducedPoolCases(t, Options{KVInt8: true}, "int8 pools differ from dequantised fp32 pools", func(rng *rand.Rand, shape []int64) reducedPool {
		hkv, blocks, per := int(shape[0]), int(shape[1]), int(shape[2]*shape[3])
		q, sc, deq := make([]int8, hkv*blocks*per), make([]float32, hkv*blocks), make([]float32, hkv*blocks*per)
		for i := range sc {
			sc[i] = 0.001 + rng.Float32()*0.05
		}
		for i := range q {
			q[i] = int8(rng.IntN(255) - 127)
			deq[i] = float32(q[i]) * sc[i/per] // the (head, block) the element lies in
		}
		return reducedPool{wide: deq, set: func(r *runner, kind, li string) {
			set(r, kind+"_cache."+li, shape, q)
			set(r, kind+"_scale."+li, shape[:2], sc)
		}}
	})
}

// reducedPool is one key or value pool of a reduced-pool test: set feeds
// it to the reduced graph (its pool input, and any inputs beside it) as
// pool kind ("key", "value") of layer li, and wide holds the same values as
// float32 for the float32 graph.
type reducedPool struct {
	set  func(r *runner, kind, li string)
	wide []float32
}

// reducedPoolCases runs the reduced-pool tests' steps — two decode rows,
// and a prefill chunk of 9 tokens (the kernel's gathered path) over a past
// — on pools of 9 blocks that pool makes (one per layer, key and value,
// of shape [kv heads, blocks, block size, head size]): the portable float32
// graph fed their wide values, and the graph built with opts (its pools
// reduced), in the kernel's form and the portable one, fed the reduced
// pools, logits and new K/V to agree within 1e-5.
func reducedPoolCases(t *testing.T, opts Options, differ string, pool func(rng *rand.Rand, shape []int64) reducedPool) {
	t.Helper()
	orttest.Need(t)
	c, src := tinyModel(t)
	const blocks = 9
	shape := []int64{int64(c.NumKeyValueHeads), blocks, DefaultBlockSize, int64(c.HeadDim)}
	rng := rand.New(rand.NewPCG(7, 8))
	pools := make([][2]reducedPool, c.NumHiddenLayers)
	for l := range pools {
		pools[l] = [2]reducedPool{pool(rng, shape), pool(rng, shape)}
	}
	setPools := func(r *runner, reduced bool) {
		for l, p := range pools {
			li := strconv.Itoa(l)
			for kv, kind := range []string{"key", "value"} {
				if reduced {
					p[kv].set(r, kind, li)
				} else {
					set(r, kind+"_cache."+li, shape, p[kv].wide)
				}
			}
		}
	}
	fp := newSession(t, c, src, Options{PortableAttention: true})
	portable := opts
	portable.PortableAttention = true
	caller := opts
	caller.CallerScatters = true // new_keys/new_values out, to compare
	reduced := map[string]*ort.Session{"kernel": newSession(t, c, src, caller), "portable": newSession(t, c, src, portable)}
	const writer = "kernel, writing the pools" // float16: slots in, logits the one output
	if !opts.KVInt8 {
		reduced[writer] = newSession(t, c, src, opts)
	}
	tests := []struct {
		name    string
		t       int     // new tokens per row
		table   []int64 // rows × 4 block ids, scattered over the pool
		ctxLens []int64
	}{
		{"decode 2 rows", 1, []int64{5, 2, 0, 8, 3, 7, 1, 4}, []int64{20, 33}},
		{"prefill chunk of 9 over a past", 9, []int64{6, 1, 3, 2}, []int64{37}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			B, T := int64(len(tt.ctxLens)), int64(tt.t)
			ids := randomIDs(3, int(B*T), c.VocabSize)
			var pos []int64
			for _, n := range tt.ctxLens {
				pos = append(pos, iota64(int(n), tt.t)...)
			}
			feed := func(r *runner, reduced bool) {
				set(r, "input_ids", []int64{B, T}, ids)
				set(r, "position_ids", []int64{B, T}, pos)
				set(r, "block_tables", []int64{B, 4}, tt.table)
				set(r, "context_lens", []int64{B}, tt.ctxLens)
				set(r, "last_index", []int64{B}, make([]int64, B))
				setPools(r, reduced)
			}
			rf := newRunner(t)
			feed(rf, false)
			want := rf.run(fp)
			for form, s := range reduced {
				rr := newRunner(t)
				feed(rr, true)
				names := []string{"logits", "new_keys.1", "new_values.1"}
				if form == writer {
					var slots []int64
					for b, n := range tt.ctxLens {
						for p := n; p < n+T; p++ {
							slots = append(slots, tt.table[int64(b)*4+p/DefaultBlockSize]*DefaultBlockSize+p%DefaultBlockSize)
						}
					}
					set(rr, "slots", []int64{B, T}, slots)
					names = names[:1]
				}
				got := rr.run(s)
				for _, name := range names {
					if d := maxDiff(got[name].data, want[name].data); d > 1e-5 {
						t.Errorf("%s attention, %s: %s by %g", form, name, differ, d)
					}
				}
			}
		})
	}
}

func TestKVInt8Options(t *testing.T) {
	c, src := tinyModel(t)
	err := Build(onnx.NewBuilder("t"), c, src, Options{Contract: ContractCompatible, KVInt8: true})
	if !errors.Is(err, ErrOptions) {
		t.Fatalf("compatible + KVInt8: %v, want ErrOptions", err)
	}
}
