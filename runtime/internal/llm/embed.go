package llm

import (
	"fmt"
	"sync"

	"github.com/edgeinfer/edgeinfer/runtime/internal/sched"
)

// Pooling is how an embedding reduces a sequence's final hidden states
// (one per position) to one vector.
type Pooling uint8

const (
	// PoolMean averages every position's hidden state.
	PoolMean Pooling = iota
	// PoolLast takes the last position's, the one that attended to every
	// token (decoder embedding models trained for it: e5-mistral, gte-Qwen).
	PoolLast
)

func (p Pooling) String() string {
	switch p {
	case PoolMean:
		return "mean"
	case PoolLast:
		return "last"
	}
	return fmt.Sprintf("pooling(%d)", uint8(p))
}

// Embedding is a request's Attach (sched.Request.Attach) asking for its
// prompt's pooled final hidden state instead of generated tokens: every
// prompt token is computed (nothing is taken from the prefix cache), the
// hidden states are pooled chunk by chunk as the prefill runs, and the
// sequence then ends with FinishStop and no token. The model needs the
// hidden_states output (llama.Options.HiddenStates).
//
// Vector is read once the request has left the scheduler; a preempted
// sequence starts its pooling again when it is admitted again.
type Embedding struct {
	Pooling Pooling

	mu     sync.Mutex
	sum    []float64
	n      int
	vector []float32
}

// Vector is the pooled hidden state (not normalised), or nil before the
// sequence's prefill has finished.
func (e *Embedding) Vector() []float32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.vector
}

func (e *Embedding) reset(hidden int) {
	e.mu.Lock()
	e.sum, e.n, e.vector = make([]float64, hidden), 0, nil
	e.mu.Unlock()
}

// add pools the rows of hs ([T, hidden], row-major) of one prefill chunk.
func (e *Embedding) add(hs []float32, hidden int, last bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	T := len(hs) / hidden
	switch e.Pooling {
	case PoolLast:
		if last {
			row := hs[(T-1)*hidden:]
			for i := range e.sum {
				e.sum[i] = float64(row[i])
			}
			e.n = 1
		}
	default:
		for t := range T {
			row := hs[t*hidden : (t+1)*hidden]
			for i, v := range row {
				e.sum[i] += float64(v)
			}
		}
		e.n += T
	}
	if last {
		v := make([]float32, hidden)
		for i, s := range e.sum {
			v[i] = float32(s / float64(max(e.n, 1)))
		}
		e.vector = v
	}
}

// HasHiddenStates reports whether the model's graph returns its final
// hidden states, which embeddings need.
func (m *Model) HasHiddenStates() bool { return m.io != nil && m.io.hidden != nil }

// HiddenSize is the length of the hidden states the graph returns (0
// without them).
func (m *Model) HiddenSize() int {
	if !m.HasHiddenStates() {
		return 0
	}
	return m.io.hiddenSize
}

// embedRow pools row i of a decode step ([B, 1, hidden]), an embedding's
// last token, and ends the sequence without a token.
func (m *Model) embedRow(id sched.SeqID, st *seqState, i int, res *sched.StepResult) {
	H := m.io.hiddenSize
	st.emb.add(float32s(m.io.hidden, (i+1)*H)[i*H:], H, true)
	res.Tokens = append(res.Tokens, sched.Sampled{Seq: id, Token: -1, Stop: sched.FinishStop})
}

// embedChunk pools a prefill chunk's hidden states into the sequence's
// embedding and, on its last chunk, ends the sequence without a token.
func (m *Model) embedChunk(id sched.SeqID, st *seqState, T int, last bool, res *sched.StepResult) {
	H := m.io.hiddenSize
	st.emb.add(float32s(m.io.hidden, T*H), H, last)
	if last {
		res.Tokens = append(res.Tokens, sched.Sampled{Seq: id, Token: -1, Stop: sched.FinishStop})
	}
}
