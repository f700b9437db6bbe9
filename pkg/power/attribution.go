package power

import (
	"cmp"
	"math/bits"
	"slices"
	"time"
)

// AttributionMethod names how Attribute splits energy, for reports.
const AttributionMethod = "token_share_per_step_largest_remainder_uj"

// StepShare is one request's token count in a step.
type StepShare struct {
	Request uint64 `json:"request"`
	Tokens  int    `json:"tokens"`
}

// Step is one engine step: its measured energy in µJ and the tokens each
// request had in it (prefill and decode tokens alike).
type Step struct {
	EnergyUJ uint64      `json:"energy_uj"`
	Shares   []StepShare `json:"shares"`
}

// Attribution is energy per request. The per-request values plus
// UnattributedUJ (steps with no tokens) equal the sum of the steps'
// energies exactly.
type Attribution struct {
	Method         string            `json:"method"`
	PerRequestUJ   map[uint64]uint64 `json:"per_request_uj"`
	UnattributedUJ uint64            `json:"unattributed_uj"`
	TotalUJ        uint64            `json:"total_uj"`
}

// Attribute splits each step's energy among its requests by token share,
// with the largest-remainder method on integer µJ so that nothing is lost
// or invented by rounding.
func Attribute(steps []Step) Attribution {
	a := Attribution{Method: AttributionMethod, PerRequestUJ: map[uint64]uint64{}}
	var w []uint64
	for _, st := range steps {
		a.TotalUJ += st.EnergyUJ
		w = w[:0]
		for _, sh := range st.Shares {
			w = append(w, uint64(max(sh.Tokens, 0)))
		}
		parts := SplitLargestRemainder(st.EnergyUJ, w)
		if parts == nil {
			a.UnattributedUJ += st.EnergyUJ
			continue
		}
		for i, sh := range st.Shares {
			a.PerRequestUJ[sh.Request] += parts[i]
		}
	}
	return a
}

// SplitByDuration splits a window's energy among consecutive steps by
// their durations, for steps shorter than the sensor's resolution (their
// own energy cannot be measured). The parts sum to total exactly.
func SplitByDuration(total uint64, durations []time.Duration) []uint64 {
	w := make([]uint64, len(durations))
	for i, d := range durations {
		w[i] = uint64(max(d, 0))
	}
	return SplitLargestRemainder(total, w)
}

// SplitLargestRemainder splits total in proportion to weights: each part
// is floor(total·w/W), and the leftover units go to the largest
// remainders (ties to the lower index). The parts sum to total exactly.
// It returns nil when the weights sum to zero. Products use 128-bit
// arithmetic, so no weight or total overflows.
func SplitLargestRemainder(total uint64, weights []uint64) []uint64 {
	var sum uint64
	for _, w := range weights {
		var carry uint64
		sum, carry = bits.Add64(sum, w, 0)
		if carry != 0 {
			return nil // a sum of weights beyond 2^64 is not a token count
		}
	}
	if sum == 0 {
		return nil
	}
	parts := make([]uint64, len(weights))
	rems := make([]uint64, len(weights))
	var given uint64
	for i, w := range weights {
		hi, lo := bits.Mul64(total, w)
		q, r := bits.Div64(hi, lo, sum) // hi < sum because w ≤ sum
		parts[i], rems[i] = q, r
		given += q
	}
	order := make([]int, len(weights))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rems[b], rems[a]) })
	for k := uint64(0); k < total-given; k++ {
		parts[order[k]]++
	}
	return parts
}
