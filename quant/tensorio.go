package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/edgeinfer/edgeinfer/pkg/onnx"
	"google.golang.org/protobuf/proto"
)

// tensorBytes returns t's raw little-endian bytes, reading external data
// relative to dir. Typed fields (float_data) are encoded.
func tensorBytes(t *onnx.TensorProto, dir string) ([]byte, error) {
	if t.GetDataLocation() == onnx.TensorProto_EXTERNAL {
		var loc string
		var off, length int64 = 0, -1
		for _, kv := range t.GetExternalData() {
			var err error
			switch kv.GetKey() {
			case "location":
				loc = kv.GetValue()
			case "offset":
				off, err = strconv.ParseInt(kv.GetValue(), 10, 64)
			case "length":
				length, err = strconv.ParseInt(kv.GetValue(), 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("%w: tensor %q: external %s: %v", ErrModel, t.GetName(), kv.GetKey(), err)
			}
		}
		if loc == "" || filepath.IsAbs(loc) || !filepath.IsLocal(loc) {
			return nil, fmt.Errorf("%w: tensor %q: external location %q must be a relative path inside the model's folder", ErrModel, t.GetName(), loc)
		}
		f, err := os.Open(filepath.Join(dir, loc))
		if err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %v", ErrModel, t.GetName(), err)
		}
		defer f.Close()
		if length < 0 {
			st, err := f.Stat()
			if err != nil {
				return nil, fmt.Errorf("%w: tensor %q: %v", ErrModel, t.GetName(), err)
			}
			length = st.Size() - off
		}
		if off < 0 || length < 0 || length > 1<<40 {
			return nil, fmt.Errorf("%w: tensor %q: external offset %d length %d", ErrModel, t.GetName(), off, length)
		}
		buf := make([]byte, length)
		if _, err := f.ReadAt(buf, off); err != nil {
			return nil, fmt.Errorf("%w: tensor %q: read external data: %v", ErrModel, t.GetName(), err)
		}
		return buf, nil
	}
	if t.RawData != nil {
		return t.RawData, nil
	}
	switch onnx.TensorProto_DataType(t.GetDataType()) {
	case onnx.TensorProto_FLOAT:
		out := make([]byte, 4*len(t.FloatData))
		for i, v := range t.FloatData {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
		return out, nil
	}
	return nil, nil
}

// TensorFloat32 decodes a float32 initializer of a model in dir (its
// external data read relative to dir).
func TensorFloat32(t *onnx.TensorProto, dir string) ([]float32, error) {
	if dt := onnx.TensorProto_DataType(t.GetDataType()); dt != onnx.TensorProto_FLOAT {
		return nil, fmt.Errorf("%w: %q is %s", ErrDType, t.GetName(), onnx.TypeName(dt))
	}
	raw, err := tensorBytes(t, dir)
	if err != nil {
		return nil, err
	}
	n := int64(1)
	for _, d := range t.GetDims() {
		n *= d
	}
	if int64(len(raw)) != 4*n {
		return nil, fmt.Errorf("%w: tensor %q: %d bytes for %v float32", ErrModel, t.GetName(), len(raw), t.GetDims())
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, nil
}

// dataWriter appends tensors to one external data file, page-aligned so
// ONNX Runtime can map them.
type dataWriter struct {
	f         *os.File
	location  string
	threshold int
	offset    int64
}

const dataAlign = 4096

// place stores raw in t: inline below the threshold, else appended to the
// data file. t's previous data fields are cleared.
func (w *dataWriter) place(t *onnx.TensorProto, raw []byte) error {
	t.RawData, t.FloatData, t.Int32Data, t.Int64Data, t.DoubleData, t.Uint64Data = nil, nil, nil, nil, nil, nil
	t.ExternalData, t.DataLocation = nil, nil
	if len(raw) < w.threshold {
		t.RawData = raw
		return nil
	}
	if pad := (dataAlign - w.offset%dataAlign) % dataAlign; pad > 0 {
		if _, err := w.f.Write(make([]byte, pad)); err != nil {
			return err
		}
		w.offset += pad
	}
	if _, err := w.f.Write(raw); err != nil {
		return err
	}
	kv := func(k, v string) *onnx.StringStringEntryProto {
		return &onnx.StringStringEntryProto{Key: proto.String(k), Value: proto.String(v)}
	}
	t.DataLocation = onnx.TensorProto_EXTERNAL.Enum()
	t.ExternalData = []*onnx.StringStringEntryProto{
		kv("location", w.location), kv("offset", strconv.FormatInt(w.offset, 10)), kv("length", strconv.Itoa(len(raw))),
	}
	w.offset += int64(len(raw))
	return nil
}

func float32Bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

func uint16Bytes(v []uint16) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], x)
	}
	return out
}
