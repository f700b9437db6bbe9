// Command jsonout is a decoder's post plugin: it finds the first complete
// JSON object or array in the generated text and returns it compacted
// (see package plugins).
package main

import (
	"strings"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/guest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

func init() { guest.Handle(run) }

func main() {}

func run(in []abi.Tensor) ([]abi.Tensor, error) {
	t, err := guest.Input(in, "text", abi.String)
	if err != nil {
		return nil, err
	}
	text, _ := t.Text()
	doc, ok := prepost.ExtractJSON(text)
	found := int64(0)
	if ok {
		found = 1
	}
	out := []abi.Tensor{abi.Str("json", doc), abi.I64("found", []int64{1}, []int64{found})}
	// the pre plugin's outputs pass through (e.g. redact's count)
	for _, p := range in {
		if p.Name != "text" && !strings.HasPrefix(p.Name, "arg.") {
			out = append(out, p)
		}
	}
	return out, nil
}
