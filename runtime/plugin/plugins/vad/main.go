// Command vad turns Silero VAD speech probabilities into speech segments
// (see package plugins).
package main

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/guest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

func init() { guest.Handle(run) }

func main() {}

func run(in []abi.Tensor) ([]abi.Tensor, error) {
	p, err := guest.Input(in, "probs", abi.Float32)
	if err != nil {
		return nil, err
	}
	probs, _ := p.Float32s()
	spec := prepost.SileroVAD
	if spec.Threshold, err = guest.ArgFloat(in, "threshold", spec.Threshold); err != nil {
		return nil, err
	}
	n := int64(len(probs)) * int64(spec.WindowSamples)
	if t, ok := abi.Find(in, "audio_len"); ok {
		v, err := t.Int64s()
		if err != nil || len(v) != 1 {
			return nil, fmt.Errorf("input audio_len is %v, want one int64", t)
		}
		n = v[0]
	}
	segs := prepost.VADSegments(probs, n, spec)
	flat := make([]int64, 0, 2*len(segs))
	for _, s := range segs {
		flat = append(flat, s.Start, s.End)
	}
	return []abi.Tensor{abi.I64("segments", []int64{int64(len(segs)), 2}, flat)}, nil
}
