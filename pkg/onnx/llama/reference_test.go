package llama

import (
	"math"
	"strconv"
)

// refForward is an independent, straightforward Hugging Face-semantics
// forward pass in Go: it recomputes the whole sequence ids and returns the
// logits of every position. Accumulations are float64.
func refForward(c *Config, src WeightSource, ids []int64) [][]float32 {
	logits, _ := refForwardHidden(c, src, ids)
	return logits
}

// refForwardHidden is refForward that also returns each position's final
// hidden state (after the last norm).
func refForwardHidden(c *Config, src WeightSource, ids []int64) (logits, hidden [][]float32) {
	get := func(name string) []float32 {
		t, err := src.Tensor(name)
		if err != nil {
			panic(err)
		}
		return t.Data
	}
	h, d := c.HiddenSize, c.HeadDim
	hq, hkv := c.NumAttentionHeads, c.NumKeyValueHeads
	group := hq / hkv
	n := len(ids)
	cosT, sinT := ropeCache(c, n)

	embed := get("model.embed_tokens.weight")
	x := make([][]float32, n)
	for t, id := range ids {
		x[t] = append([]float32(nil), embed[int(id)*h:int(id+1)*h]...)
	}
	for l := range c.NumHiddenLayers {
		p := "model.layers." + strconv.Itoa(l) + "."
		var qb, kb, vb, ob []float32
		if c.QKVBias() {
			qb, kb, vb = get(p+"self_attn.q_proj.bias"), get(p+"self_attn.k_proj.bias"), get(p+"self_attn.v_proj.bias")
		}
		if c.OBias() {
			ob = get(p + "self_attn.o_proj.bias")
		}
		q := make([][]float32, n)
		k := make([][]float32, n)
		v := make([][]float32, n)
		for t := range n {
			hn := refNorm(x[t], get(p+"input_layernorm.weight"), c.RMSNormEps)
			q[t] = refLinear(hn, get(p+"self_attn.q_proj.weight"), qb, hq*d)
			k[t] = refLinear(hn, get(p+"self_attn.k_proj.weight"), kb, hkv*d)
			v[t] = refLinear(hn, get(p+"self_attn.v_proj.weight"), vb, hkv*d)
			refRope(q[t], hq, d, cosT[t*d/2:(t+1)*d/2], sinT[t*d/2:(t+1)*d/2])
			refRope(k[t], hkv, d, cosT[t*d/2:(t+1)*d/2], sinT[t*d/2:(t+1)*d/2])
		}
		for t := range n {
			attn := make([]float32, hq*d)
			for head := range hq {
				kh := head / group
				qv := q[t][head*d : (head+1)*d]
				scores := make([]float64, t+1)
				maxS := math.Inf(-1)
				for s := 0; s <= t; s++ {
					var dot float64
					for i := range d {
						dot += float64(qv[i]) * float64(k[s][kh*d+i])
					}
					scores[s] = dot / math.Sqrt(float64(d))
					maxS = math.Max(maxS, scores[s])
				}
				var sum float64
				for s := range scores {
					scores[s] = math.Exp(scores[s] - maxS)
					sum += scores[s]
				}
				for i := range d {
					var acc float64
					for s := range scores {
						acc += scores[s] / sum * float64(v[s][kh*d+i])
					}
					attn[head*d+i] = float32(acc)
				}
			}
			o := refLinear(attn, get(p+"self_attn.o_proj.weight"), ob, h)
			for i := range o {
				x[t][i] += o[i]
			}
			hn := refNorm(x[t], get(p+"post_attention_layernorm.weight"), c.RMSNormEps)
			gate := refLinear(hn, get(p+"mlp.gate_proj.weight"), nil, c.IntermediateSize)
			up := refLinear(hn, get(p+"mlp.up_proj.weight"), nil, c.IntermediateSize)
			for i := range gate {
				g := float64(gate[i])
				gate[i] = float32(g / (1 + math.Exp(-g)) * float64(up[i]))
			}
			down := refLinear(gate, get(p+"mlp.down_proj.weight"), nil, h)
			for i := range down {
				x[t][i] += down[i]
			}
		}
	}
	lm := embed
	if !c.TieWordEmbeddings {
		lm = get("lm_head.weight")
	}
	logits, hidden = make([][]float32, n), make([][]float32, n)
	for t := range n {
		hidden[t] = refNorm(x[t], get("model.norm.weight"), c.RMSNormEps)
		logits[t] = refLinear(hidden[t], lm, nil, c.VocabSize)
	}
	return logits, hidden
}

func refNorm(x, w []float32, eps float64) []float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(float64(v) * inv * float64(w[i]))
	}
	return out
}

// refLinear computes x·wᵀ + b with w [out, in].
func refLinear(x, w, b []float32, out int) []float32 {
	in := len(x)
	y := make([]float32, out)
	for o := range out {
		var acc float64
		row := w[o*in : (o+1)*in]
		for i, v := range x {
			acc += float64(v) * float64(row[i])
		}
		if b != nil {
			acc += float64(b[o])
		}
		y[o] = float32(acc)
	}
	return y
}

// refRope rotates each head's halves (rotate_half form) in place.
func refRope(x []float32, heads, d int, cos, sin []float32) {
	half := d / 2
	for h := range heads {
		v := x[h*d : (h+1)*d]
		for i := range half {
			a, b := float64(v[i]), float64(v[i+half])
			c, s := float64(cos[i]), float64(sin[i])
			v[i] = float32(a*c - b*s)
			v[i+half] = float32(b*c + a*s)
		}
	}
}
