// Command redact is a decoder's pre plugin: it masks e-mail addresses,
// card-like digit runs and phone numbers in the prompt before the model
// sees it (see package plugins).
package main

import (
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/guest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

func init() { guest.Handle(run) }

func main() {}

func run(in []abi.Tensor) ([]abi.Tensor, error) {
	p, err := guest.Input(in, "prompt", abi.String)
	if err != nil {
		return nil, err
	}
	text, _ := p.Text()
	out, n := prepost.Redact(text)
	return []abi.Tensor{abi.Str("prompt", out), abi.I64("redacted", []int64{1}, []int64{int64(n)})}, nil
}
