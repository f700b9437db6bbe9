package platforms

import (
	"strings"
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
)

func TestQNNQualifies(t *testing.T) {
	build := func(dim onnx.Dim, qdq bool) []byte {
		b := onnx.NewBuilder("m")
		x := b.Input("x", onnx.TensorProto_FLOAT, onnx.Fixed(1), dim)
		if qdq {
			s, z := b.Scalar(0.02), b.Uint8("z", nil, []uint8{128})
			x = b.Op("DequantizeLinear", []string{b.Op("QuantizeLinear", []string{x, s, z}), s, z})
		}
		b.Node(onnx.DomainONNX, "Relu", []string{x}, []string{"y"})
		b.Output("y", onnx.TensorProto_FLOAT, onnx.Fixed(1), dim)
		m, err := b.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if ok, why, err := QNNQualifies(build(onnx.Fixed(8), true)); err != nil || !ok {
		t.Errorf("static QDQ model refused: %v %v", why, err)
	}
	ok, why, err := QNNQualifies(build(onnx.Sym("seq"), false))
	if err != nil || ok || len(why) != 2 || !strings.Contains(why[0], `"seq"`) || !strings.Contains(why[1], "qdq-int8") {
		t.Errorf("dynamic float model: %v %v %v", ok, why, err)
	}
	if _, _, err := QNNQualifies([]byte("garbage")); err == nil {
		t.Error("garbage accepted")
	}
}
