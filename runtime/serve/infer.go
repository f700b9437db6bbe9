package serve

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"

	"github.com/edgeinfer/edgeinfer/pkg/npy"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
	"github.com/edgeinfer/edgeinfer/runtime/ort"
)

// jsonTensor is a tensor in a JSON body: its dtype, shape and either the
// values as a flat row-major list or the raw little-endian bytes in
// base64 ("b64").
type jsonTensor struct {
	DType string    `json:"dtype"`
	Shape []int64   `json:"shape"`
	Data  []float64 `json:"data,omitempty"`
	B64   string    `json:"b64,omitempty"`
}

type inferRequest struct {
	Inputs    map[string]jsonTensor `json:"inputs"`
	Edgeinfer *extension            `json:"edgeinfer"`
}

// infer serves POST /v1/infer/<model>: a JSON body {"inputs": {name:
// tensor}}, or one input as a NumPy .npy body (Content-Type
// application/x-npy, the input named by ?input=NAME, or the model's only
// input). Outputs come back as JSON tensors with their values listed.
func (s *Server) infer(w *responseWriter, r *http.Request) {
	m, release, aerr := s.hold(r.Context(), w, r.PathValue("model"), "oneshot", nil)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	defer release()
	w.model = m.Name
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxInferBodyBytes)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, errorOf(decodeJSON(errReader{err}, nil)))
		return
	}
	inputs := engine.Inputs{}
	defer func() { _ = ort.CloseAll(inputs) }()
	var q inferRequest
	if ct := r.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/x-npy") || strings.HasPrefix(ct, "application/octet-stream") {
		name := r.URL.Query().Get("input")
		if name == "" && len(m.Inputs) == 1 {
			name = m.Inputs[0].Name
		}
		if name == "" {
			names := make([]string, len(m.Inputs))
			for i, in := range m.Inputs {
				names[i] = in.Name
			}
			writeError(w, badRequest("input", "a .npy body needs ?input=NAME naming the model input it feeds (one of %v)", names))
			return
		}
		dt, a, err := npyInput(body)
		if err != nil {
			writeError(w, badRequest("body", "%v: send a NumPy .npy file (version 1-3, C order, little-endian)", err))
			return
		}
		if inputs[name], err = ort.CopyBytes(dt, a.Shape, a.Data); err != nil {
			writeError(w, badRequest("body", "%v", err))
			return
		}
	} else {
		if err := unmarshalRequest(body, &q); err != nil {
			writeError(w, errorOf(err))
			return
		}
		if len(q.Inputs) == 0 {
			writeError(w, badRequest("inputs", "required: {name: {dtype, shape, data}} for each model input"))
			return
		}
		for name, jt := range q.Inputs {
			dt, data, err := jt.bytes()
			if err == nil {
				inputs[name], err = ort.CopyBytes(dt, jt.Shape, data)
			}
			if err != nil {
				writeError(w, badRequest("inputs."+name, "%v", err))
				return
			}
		}
	}
	v := &validated{}
	if err := v.priority(q.Edgeinfer, r.Header); err != nil {
		writeError(w, errorOf(err))
		return
	}
	out, err := s.e.Infer(r.Context(), m.Name, inputs, engine.InferOptions{Class: v.class, SLO: v.slo, FailFast: v.failFast, KeepAlive: v.keepAlive})
	if err != nil {
		writeError(w, errorOf(err))
		return
	}
	defer func() { _ = out.Close() }()
	res := map[string]jsonTensor{}
	for name, t := range out {
		jt := jsonTensor{DType: t.DType().String(), Shape: t.Shape()}
		if jt.Data, err = values(t.DType(), t.Bytes()); err != nil {
			jt.Data, jt.B64 = nil, base64.StdEncoding.EncodeToString(t.Bytes())
		}
		res[name] = jt
	}
	release()
	writeJSON(w, http.StatusOK, map[string]any{"model": m.Name, "outputs": res})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// jsonDTypes are the element types a JSON tensor may name.
var jsonDTypes = map[string]ort.DType{
	"float32": ort.Float32, "float64": ort.Float64, "int64": ort.Int64, "int32": ort.Int32, "int16": ort.Int16,
	"uint16": ort.Uint16, "int8": ort.Int8, "uint8": ort.Uint8, "bool": ort.Bool,
}

// npyDTypes are the element types of the .npy dtypes pkg/npy reads.
var npyDTypes = map[string]ort.DType{
	"<f2": ort.Float16, "<f4": ort.Float32, "<f8": ort.Float64, "|i1": ort.Int8, "<i2": ort.Int16, "<i4": ort.Int32, "<i8": ort.Int64,
	"|u1": ort.Uint8, "<u2": ort.Uint16, "<u4": ort.Uint32, "<u8": ort.Uint64, "|b1": ort.Bool,
}

// npyInput reads a .npy body (pkg/npy) and its element type.
func npyInput(body []byte) (ort.DType, npy.Array, error) {
	a, err := npy.Parse(body)
	if err != nil {
		return 0, a, err
	}
	return npyDTypes[a.Descr], a, nil
}

// bytes is the tensor's data, little-endian, and its element type.
func (jt jsonTensor) bytes() (ort.DType, []byte, error) {
	dt, ok := jsonDTypes[jt.DType]
	if !ok {
		return 0, nil, fmt.Errorf("dtype %q (want one of float32, float64, int64, int32, int16, uint16, int8, uint8, bool)", jt.DType)
	}
	size := dt.Size()
	n := int64(1)
	for _, d := range jt.Shape {
		if d < 0 || (d > 0 && n > math.MaxInt32/d) {
			return 0, nil, fmt.Errorf("shape %v: dimensions must be ≥ 0 and the product small", jt.Shape)
		}
		n *= d
	}
	if jt.B64 != "" {
		b, err := base64.StdEncoding.DecodeString(jt.B64)
		if err != nil {
			return 0, nil, fmt.Errorf("b64: %v", err)
		}
		if int64(len(b)) != n*int64(size) {
			return 0, nil, fmt.Errorf("b64 holds %d bytes, shape %v of %s needs %d", len(b), jt.Shape, jt.DType, n*int64(size))
		}
		return dt, b, nil
	}
	if int64(len(jt.Data)) != n {
		return 0, nil, fmt.Errorf("data has %d values, shape %v needs %d", len(jt.Data), jt.Shape, n)
	}
	buf := make([]byte, 0, n*int64(size))
	for _, x := range jt.Data {
		switch dt {
		case ort.Float32:
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(float32(x)))
		case ort.Float64:
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(x))
		case ort.Int64:
			buf = binary.LittleEndian.AppendUint64(buf, uint64(int64(x)))
		case ort.Int32:
			buf = binary.LittleEndian.AppendUint32(buf, uint32(int32(x)))
		case ort.Int16, ort.Uint16:
			buf = binary.LittleEndian.AppendUint16(buf, uint16(int64(x)))
		case ort.Bool:
			buf = append(buf, map[bool]byte{true: 1, false: 0}[x != 0])
		default:
			buf = append(buf, byte(int64(x)))
		}
	}
	return dt, buf, nil
}

// values lists a tensor's elements as numbers, for the element types a
// JSON tensor may name (others go back as b64).
func values(dt ort.DType, data []byte) ([]float64, error) {
	listable := false
	for _, d := range jsonDTypes {
		listable = listable || d == dt
	}
	size := dt.Size()
	if !listable || len(data)%size != 0 {
		return nil, errors.New("not listable")
	}
	out := make([]float64, 0, len(data)/size)
	for b := data; len(b) >= size; b = b[size:] {
		switch dt {
		case ort.Float32:
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(b))))
		case ort.Float64:
			out = append(out, math.Float64frombits(binary.LittleEndian.Uint64(b)))
		case ort.Int64:
			out = append(out, float64(int64(binary.LittleEndian.Uint64(b))))
		case ort.Int32:
			out = append(out, float64(int32(binary.LittleEndian.Uint32(b))))
		case ort.Int16:
			out = append(out, float64(int16(binary.LittleEndian.Uint16(b))))
		case ort.Uint16:
			out = append(out, float64(binary.LittleEndian.Uint16(b)))
		case ort.Int8:
			out = append(out, float64(int8(b[0])))
		default: // uint8, bool
			out = append(out, float64(b[0]))
		}
	}
	return out, nil
}
