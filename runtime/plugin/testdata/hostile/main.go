// Command hostile is a plugin that misbehaves on request, for the host's
// sandbox tests: input "mode" (a string) picks what it does.
package main

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/guest"
)

// It asks for held inputs (guest.HoldLarge), so that the host's handles
// can be abused and the kit's Read tested.
func init() { guest.Handle(run, guest.HoldLarge()) }

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
	case "host-nms": // quadratic work handed to the host: the deadline must stop it
		const n = 200000
		flat := make([]float32, 0, 5*n)
		for i := range n { // disjoint boxes: each is its own group, a pass over all each
			x, y := float32(i%500)/500, float32(i/500)/500
			flat = append(flat, 0.5, x, y, x+0.001, y+0.001)
		}
		return guest.Host("nms.weighted", []abi.Tensor{abi.F32("candidates", []int64{n, 5}, flat)})
	case "host-image": // a PNG whose header claims 30000 x 30000 pixels
		return guest.Host("image.prepare", []abi.Tensor{abi.Bytes("image", pngHeader(30000, 30000)),
			abi.I64("width", nil, []int64{8}), abi.I64("height", nil, []int64{8})})
	case "host-unknown":
		return guest.Host("fs.read", []abi.Tensor{abi.Str("path", "/etc/passwd")})
	case "host-pointer": // a request pointer outside memory
		rawHostCall(0xfffffff0, 64)
		return nil, nil
	case "held-sum": // read a held input in and sum it
		x, _ := abi.Find(in, "x")
		held := x.Held()
		x, err := guest.Read(x)
		if err != nil {
			return nil, err
		}
		v, err := x.Float32s()
		if err != nil {
			return nil, err
		}
		var sum float64
		for _, f := range v {
			sum += float64(f)
		}
		h := int64(0)
		if held {
			h = 1
		}
		return []abi.Tensor{abi.F64("sum", nil, []float64{sum}), abi.I64("held", nil, []int64{h})}, nil
	case "held-read": // read data under a handle this request does not hold
		rawRead(5)
		return nil, nil
	case "held-ref": // name such a handle to a primitive
		return guest.Host("argmax.rows", []abi.Tensor{{Name: "x", DType: abi.Float32, Shape: []int64{1, 4}, Handle: 5}})
	case "held-out": // answer with a handle instead of data
		return []abi.Tensor{{Name: "x", DType: abi.Float32, Shape: []int64{4}, Handle: 1}}, nil
	case "clock":
		return []abi.Tensor{abi.I64("unix_nano", nil, []int64{time.Now().UnixNano()})}, nil
	case "random":
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return []abi.Tensor{abi.Bytes("random", b)}, nil
	}
	return nil, errors.New("unknown mode " + mode)
}

// pngHeader is a PNG signature and IHDR chunk for a w x h RGB image, with
// no pixel data.
func pngHeader(w, h uint32) []byte {
	b := []byte("\x89PNG\r\n\x1a\n")
	ihdr := binary.BigEndian.AppendUint32([]byte("IHDR"), w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	ihdr = append(ihdr, 8, 2, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ihdr)-4))
	b = append(b, ihdr...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(ihdr))
}
