// Command hostile is a plugin that misbehaves on request, for the host's
// sandbox tests: input "mode" (a string) picks what it does.
package main

import (
	"crypto/rand"
	"errors"
	"os"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/guest"
)

func init() { guest.Handle(run) }

func main() {}

var hoard [][]byte

func run(in []abi.Tensor) ([]abi.Tensor, error) {
	m, ok := abi.Find(in, "mode")
	if !ok {
		m, _ = abi.Find(in, "arg.mode") // edgeinfer plugin run --arg mode=...
	}
	mode, _ := m.Text()
	arg, ok := abi.Find(in, "arg")
	if !ok {
		arg, _ = abi.Find(in, "arg.arg")
	}
	switch mode {
	case "echo":
		return in, nil
	case "loop":
		for {
		}
	case "bomb":
		for {
			b := make([]byte, 1<<20)
			b[0] = 1
			hoard = append(hoard, b)
		}
	case "panic":
		panic("hostile panic")
	case "exit":
		os.Exit(3)
	case "error":
		return nil, errors.New("refused on purpose")
	case "open":
		name, _ := arg.Text()
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		return []abi.Tensor{abi.Bytes("data", data)}, nil
	case "spin": // arithmetic only, for the overhead benchmark
		n, _ := arg.Text()
		x := 1.0
		for i := range len(n) * 1000000 {
			x = x*1.0000001 + float64(i&7)
		}
		return []abi.Tensor{abi.F64("x", nil, []float64{x})}, nil
	case "alloc": // allocation only
		n, _ := arg.Text()
		var keep [][]byte
		for range len(n) * 1000 {
			keep = append(keep, make([]byte, 1000))
		}
		return []abi.Tensor{abi.I64("n", nil, []int64{int64(len(keep))})}, nil
	case "clock":
		return []abi.Tensor{abi.I64("unix_nano", nil, []int64{time.Now().UnixNano()})}, nil
	case "random":
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return []abi.Tensor{abi.Bytes("random", b)}, nil
	}
	return nil, errors.New("unknown mode " + mode)
}
