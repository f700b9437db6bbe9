// Command empty is the smallest plugin: it returns no tensors, so a call
// costs only the ABI (BenchmarkCallOverhead).
package main

import (
	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/guest"
)

func init() { guest.Handle(func([]abi.Tensor) ([]abi.Tensor, error) { return nil, nil }) }

func main() {}
