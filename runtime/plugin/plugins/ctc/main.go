// Command ctc decodes PaddleOCR recogniser output into text (see package
// plugins). Each step's best class is the host's argmax.rows primitive
// (runtime/plugin/primitive); the collapse and the spelling are here.
package main

import (
	"fmt"
	"os"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/guest"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/prepost"
)

func init() { guest.Handle(run, guest.HoldLarge()) }

func main() {}

// The dictionary file is read once per instance (it is 26 KB of text and
// 6625 classes: re-reading it per request would cost more than decoding).
var (
	dictPath string
	charset  []string
)

func run(in []abi.Tensor) ([]abi.Tensor, error) {
	p, err := guest.Input(in, guest.Arg(in, "input", "softmax_11.tmp_0"), abi.Float32)
	if err != nil {
		return nil, err
	}
	if len(p.Shape) != 3 || p.Shape[0] != 1 {
		return nil, fmt.Errorf("input %v: want float32 [1,T,C]", p)
	}
	cs := charset
	if d, ok := abi.Find(in, "dict"); ok {
		text, err := d.Text()
		if err != nil {
			return nil, err
		}
		cs = prepost.PaddleCharset(text)
	} else if path := guest.Arg(in, "dict", "/dict/ppocr_keys_v1.txt"); path != dictPath || cs == nil {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("dictionary: %w (grant its directory in the bundle manifest, or pass input dict)", err)
		}
		charset, dictPath = prepost.PaddleCharset(string(b)), path
		cs = charset
	}
	T, C := int(p.Shape[1]), int(p.Shape[2])
	if len(cs) != C {
		return nil, fmt.Errorf("dictionary has %d classes with blank and space, the model %d", len(cs), C)
	}
	p.Name = "x"
	best, err := guest.Host("argmax.rows", []abi.Tensor{p})
	if err != nil {
		return nil, err
	}
	idx, _ := abi.Find(best, "index")
	val, _ := abi.Find(best, "value")
	iv, err1 := idx.Int32s()
	vv, err2 := val.Float32s()
	if err1 != nil || err2 != nil || len(iv) != T || len(vv) != T {
		return nil, fmt.Errorf("argmax.rows returned %v and %v for %d steps", idx, val, T)
	}
	r := prepost.CTCCollapse(iv, vv, cs)
	return []abi.Tensor{
		abi.Str("text", r.Text),
		abi.F32("score", nil, []float32{float32(r.Score)}),
		abi.I32("indices", []int64{int64(len(r.Indices))}, r.Indices),
	}, nil
}
