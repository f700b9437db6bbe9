package serve

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
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
// input). Outputs come back
// as JSON tensors with their values listed.
func (s *Server) infer(w http.ResponseWriter, r *http.Request) {
	m, aerr := s.findModel(r.PathValue("model"), "oneshot")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxInferBodyBytes)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, errorOf(decodeJSON(errReader{err}, nil)))
		return
	}
	inputs := map[string]Tensor{}
	var q inferRequest
	if ct := r.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/x-npy") || strings.HasPrefix(ct, "application/octet-stream") {
		name := r.URL.Query().Get("input")
		if name == "" && len(m.Inputs) == 1 {
			name = m.Inputs[0]
		}
		if name == "" {
			writeError(w, badRequest("input", "a .npy body needs ?input=NAME naming the model input it feeds (one of %v)", m.Inputs))
			return
		}
		t, err := parseNPY(body)
		if err != nil {
			writeError(w, badRequest("body", "%v: send a NumPy .npy file (version 1-3, C order, little-endian)", err))
			return
		}
		inputs[name] = t
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
			t, err := jt.tensor()
			if err != nil {
				writeError(w, badRequest("inputs."+name, "%v", err))
				return
			}
			inputs[name] = t
		}
	}
	v := &validated{}
	if err := v.priority(q.Edgeinfer, r.Header); err != nil {
		writeError(w, errorOf(err))
		return
	}
	out, err := s.b.Infer(r.Context(), m.Name, inputs, InferOptions{Class: v.class, SLO: v.slo, FailFast: v.failFast})
	if err != nil {
		writeError(w, errorOf(err))
		return
	}
	res := map[string]jsonTensor{}
	for name, t := range out {
		jt := jsonTensor{DType: t.DType, Shape: t.Shape}
		if jt.Data, err = values(t); err != nil {
			jt.Data, jt.B64 = nil, base64.StdEncoding.EncodeToString(t.Data)
		}
		res[name] = jt
	}
	writeJSON(w, http.StatusOK, map[string]any{"model": m.Name, "outputs": res})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

var dtypeSize = map[string]int{"float32": 4, "float64": 8, "int64": 8, "int32": 4, "int16": 2, "uint16": 2, "int8": 1, "uint8": 1, "bool": 1}

func (jt jsonTensor) tensor() (Tensor, error) {
	size, ok := dtypeSize[jt.DType]
	if !ok {
		return Tensor{}, fmt.Errorf("dtype %q (want one of float32, float64, int64, int32, int16, uint16, int8, uint8, bool)", jt.DType)
	}
	n := int64(1)
	for _, d := range jt.Shape {
		if d < 0 || (d > 0 && n > math.MaxInt32/d) {
			return Tensor{}, fmt.Errorf("shape %v: dimensions must be ≥ 0 and the product small", jt.Shape)
		}
		n *= d
	}
	t := Tensor{DType: jt.DType, Shape: jt.Shape}
	if jt.B64 != "" {
		b, err := base64.StdEncoding.DecodeString(jt.B64)
		if err != nil {
			return Tensor{}, fmt.Errorf("b64: %v", err)
		}
		if int64(len(b)) != n*int64(size) {
			return Tensor{}, fmt.Errorf("b64 holds %d bytes, shape %v of %s needs %d", len(b), jt.Shape, jt.DType, n*int64(size))
		}
		t.Data = b
		return t, nil
	}
	if int64(len(jt.Data)) != n {
		return Tensor{}, fmt.Errorf("data has %d values, shape %v needs %d", len(jt.Data), jt.Shape, n)
	}
	buf := make([]byte, 0, n*int64(size))
	for _, x := range jt.Data {
		switch jt.DType {
		case "float32":
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(float32(x)))
		case "float64":
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(x))
		case "int64":
			buf = binary.LittleEndian.AppendUint64(buf, uint64(int64(x)))
		case "int32":
			buf = binary.LittleEndian.AppendUint32(buf, uint32(int32(x)))
		case "int16", "uint16":
			buf = binary.LittleEndian.AppendUint16(buf, uint16(int64(x)))
		case "bool":
			buf = append(buf, map[bool]byte{true: 1, false: 0}[x != 0])
		default:
			buf = append(buf, byte(int64(x)))
		}
	}
	t.Data = buf
	return t, nil
}

// values lists a tensor's elements as numbers.
func values(t Tensor) ([]float64, error) {
	size, ok := dtypeSize[t.DType]
	if !ok || len(t.Data)%size != 0 {
		return nil, errors.New("not listable")
	}
	out := make([]float64, 0, len(t.Data)/size)
	for b := t.Data; len(b) >= size; b = b[size:] {
		switch t.DType {
		case "float32":
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(b))))
		case "float64":
			out = append(out, math.Float64frombits(binary.LittleEndian.Uint64(b)))
		case "int64":
			out = append(out, float64(int64(binary.LittleEndian.Uint64(b))))
		case "int32":
			out = append(out, float64(int32(binary.LittleEndian.Uint32(b))))
		case "int16":
			out = append(out, float64(int16(binary.LittleEndian.Uint16(b))))
		case "uint16":
			out = append(out, float64(binary.LittleEndian.Uint16(b)))
		case "int8":
			out = append(out, float64(int8(b[0])))
		default:
			out = append(out, float64(b[0]))
		}
	}
	return out, nil
}

var npyDTypes = map[string]string{"<f4": "float32", "<f8": "float64", "<i8": "int64", "<i4": "int32", "<i2": "int16", "<u2": "uint16", "|i1": "int8", "|u1": "uint8", "|b1": "bool"}

// parseNPY reads a NumPy .npy file (versions 1-3, C order, little-endian).
func parseNPY(b []byte) (Tensor, error) {
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return Tensor{}, errors.New("not a .npy file")
	}
	var hlen, off int
	switch b[6] {
	case 1:
		hlen, off = int(binary.LittleEndian.Uint16(b[8:10])), 10
	case 2, 3:
		if len(b) < 12 {
			return Tensor{}, errors.New("truncated .npy header")
		}
		hlen, off = int(binary.LittleEndian.Uint32(b[8:12])), 12
	default:
		return Tensor{}, fmt.Errorf(".npy version %d", b[6])
	}
	if hlen < 0 || off+hlen > len(b) {
		return Tensor{}, errors.New("truncated .npy header")
	}
	hdr := string(b[off : off+hlen])
	field := func(k string) string {
		i := strings.Index(hdr, "'"+k+"':")
		if i < 0 {
			return ""
		}
		rest := strings.TrimSpace(hdr[i+len(k)+3:])
		if strings.HasPrefix(rest, "(") {
			if j := strings.IndexByte(rest, ')'); j >= 0 {
				return rest[1:j]
			}
			return ""
		}
		if j := strings.IndexAny(rest, ",}"); j >= 0 {
			rest = rest[:j]
		}
		return strings.Trim(strings.TrimSpace(rest), "'")
	}
	dt, ok := npyDTypes[field("descr")]
	if !ok {
		return Tensor{}, fmt.Errorf("unsupported .npy dtype %q", field("descr"))
	}
	if field("fortran_order") != "False" {
		return Tensor{}, errors.New("fortran-order .npy is not supported")
	}
	var shape []int64
	n := int64(1)
	for _, p := range strings.Split(field("shape"), ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		d, err := strconv.ParseInt(p, 10, 64)
		if err != nil || d < 0 || (d > 0 && n > math.MaxInt32/d) {
			return Tensor{}, fmt.Errorf("bad .npy shape %q", field("shape"))
		}
		shape = append(shape, d)
		n *= d
	}
	data := b[off+hlen:]
	if int64(len(data)) != n*int64(dtypeSize[dt]) {
		return Tensor{}, fmt.Errorf(".npy holds %d data bytes, shape %v of %s needs %d", len(data), shape, dt, n*int64(dtypeSize[dt]))
	}
	return Tensor{DType: dt, Shape: shape, Data: bytes.Clone(data)}, nil
}
