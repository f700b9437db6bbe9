package onnx

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
)

// Report summarises a model for offline tools (the inspect command, bundle
// recognition, quantisation): what it takes and gives, and what it is made
// of. The runtime reads only a model's header, with runtime/ort's
// ReadModelInfo, which does not link these protobuf types.
type Report struct {
	IRVersion       int64
	ProducerName    string
	ProducerVersion string
	Opsets          []OpsetInfo
	Inputs          []ValueSummary // graph inputs that are not initializers
	Outputs         []ValueSummary
	Initializers    []InitializerInfo
	Params          int64 // elements over all initializers
	Bytes           int64 // bytes over all initializers, external ones included
	ExternalBytes   int64 // bytes of initializers stored outside the model file
	Nodes           int   // nodes, subgraphs included
	Ops             map[string]int
	Metadata        map[string]string
}

// OpsetInfo is one opset import; Domain "" is the default ONNX domain.
type OpsetInfo struct {
	Domain  string
	Version int64
}

// ValueSummary is a graph input or output as a report prints it: name,
// element type name and shape, a dimension being its size, its symbolic
// name, or "?" when unknown. (runtime/ort's ValueInfo is the typed form a
// session is fed by.)
type ValueSummary struct {
	Name  string
	Type  string
	Shape []string
}

// InitializerInfo describes one initializer.
type InitializerInfo struct {
	Name     string
	Type     string
	Shape    []int64
	Params   int64
	Bytes    int64
	External bool
}

// OpCount is one entry of the operator histogram.
type OpCount struct {
	Op    string // "Op" for the default domain, else "domain.Op"
	Count int
}

// Inspect decodes model bytes and summarises them. Corrupt or truncated
// bytes give an error wrapping ErrInvalidModel; it never panics.
func Inspect(model []byte) (*Report, error) {
	var m ModelProto
	if err := proto.Unmarshal(model, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidModel, err)
	}
	return InspectModel(&m)
}

// InspectModel summarises a decoded model.
func InspectModel(m *ModelProto) (*Report, error) {
	g := m.GetGraph()
	if g == nil {
		return nil, fmt.Errorf("%w: no graph", ErrInvalidModel)
	}
	if m.GetIrVersion() <= 0 {
		return nil, fmt.Errorf("%w: ir_version %d", ErrInvalidModel, m.GetIrVersion())
	}
	r := &Report{
		IRVersion:       m.GetIrVersion(),
		ProducerName:    m.GetProducerName(),
		ProducerVersion: m.GetProducerVersion(),
		Ops:             map[string]int{},
		Metadata:        map[string]string{},
	}
	for _, o := range m.GetOpsetImport() {
		r.Opsets = append(r.Opsets, OpsetInfo{Domain: o.GetDomain(), Version: o.GetVersion()})
	}
	for _, p := range m.GetMetadataProps() {
		r.Metadata[p.GetKey()] = p.GetValue()
	}
	inits := map[string]bool{}
	for _, t := range g.GetInitializer() {
		info, err := initializerInfo(t)
		if err != nil {
			return nil, err
		}
		inits[info.Name] = true
		r.Initializers = append(r.Initializers, info)
		r.Params += info.Params
		r.Bytes += info.Bytes
		if info.External {
			r.ExternalBytes += info.Bytes
		}
		if r.Params < 0 || r.Bytes < 0 {
			return nil, fmt.Errorf("%w: initializer sizes overflow", ErrInvalidModel)
		}
	}
	for _, v := range g.GetInput() {
		if !inits[v.GetName()] {
			r.Inputs = append(r.Inputs, describeValue(v))
		}
	}
	for _, v := range g.GetOutput() {
		r.Outputs = append(r.Outputs, describeValue(v))
	}
	countOps(g, r, 0)
	return r, nil
}

// maxSubgraphDepth bounds recursion on hostile inputs nesting graphs in
// attributes.
const maxSubgraphDepth = 64

func countOps(g *GraphProto, r *Report, depth int) {
	if depth > maxSubgraphDepth {
		return
	}
	for _, n := range g.GetNode() {
		r.Nodes++
		op := n.GetOpType()
		if d := n.GetDomain(); d != "" && d != "ai.onnx" {
			op = d + "." + op
		}
		r.Ops[op]++
		for _, a := range n.GetAttribute() {
			if sub := a.GetG(); sub != nil {
				countOps(sub, r, depth+1)
			}
			for _, sub := range a.GetGraphs() {
				countOps(sub, r, depth+1)
			}
		}
	}
}

func initializerInfo(t *TensorProto) (InitializerInfo, error) {
	dt := TensorProto_DataType(t.GetDataType())
	info := InitializerInfo{
		Name:  t.GetName(),
		Type:  TypeName(dt),
		Shape: t.GetDims(),
	}
	info.Params = numElems(info.Shape)
	if info.Params < 0 {
		return info, fmt.Errorf("%w: initializer %q has shape %v", ErrInvalidModel, info.Name, info.Shape)
	}
	if t.GetDataLocation() == TensorProto_EXTERNAL {
		info.External = true
		for _, e := range t.GetExternalData() {
			if e.GetKey() == "length" {
				n, err := strconv.ParseInt(e.GetValue(), 10, 64)
				if err != nil || n < 0 {
					return info, fmt.Errorf("%w: initializer %q: external length %q", ErrInvalidModel, info.Name, e.GetValue())
				}
				info.Bytes = n
			}
		}
	}
	if info.Bytes == 0 {
		switch {
		case len(t.GetRawData()) > 0:
			info.Bytes = int64(len(t.GetRawData()))
		case ElemSize(dt) > 0 && info.Params <= (1<<62)/int64(ElemSize(dt)):
			info.Bytes = info.Params * int64(ElemSize(dt))
		}
	}
	return info, nil
}

func describeValue(v *ValueInfoProto) ValueSummary {
	out := ValueSummary{Name: v.GetName(), Type: "?"}
	tt := v.GetType().GetTensorType()
	if tt == nil {
		return out
	}
	out.Type = TypeName(TensorProto_DataType(tt.GetElemType()))
	for _, d := range tt.GetShape().GetDim() {
		switch x := d.GetValue().(type) {
		case *TensorShapeProto_Dimension_DimParam:
			out.Shape = append(out.Shape, x.DimParam)
		case *TensorShapeProto_Dimension_DimValue:
			out.Shape = append(out.Shape, strconv.FormatInt(x.DimValue, 10))
		default:
			out.Shape = append(out.Shape, "?")
		}
	}
	return out
}

// TypeName returns the short lowercase name of an element type ("float32",
// "int64", "float16", …), or "type(N)" for values it does not know.
func TypeName(dt TensorProto_DataType) string {
	switch dt {
	case TensorProto_FLOAT:
		return "float32"
	case TensorProto_DOUBLE:
		return "float64"
	case TensorProto_FLOAT16:
		return "float16"
	case TensorProto_BFLOAT16:
		return "bfloat16"
	}
	if name, ok := TensorProto_DataType_name[int32(dt)]; ok {
		return strings.ToLower(name)
	}
	return "type(" + strconv.Itoa(int(dt)) + ")"
}

// OpHistogram returns the operator counts, most frequent first.
func (r *Report) OpHistogram() []OpCount {
	out := make([]OpCount, 0, len(r.Ops))
	for op, n := range r.Ops {
		out = append(out, OpCount{Op: op, Count: n})
	}
	slices.SortFunc(out, func(a, b OpCount) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Op, b.Op)
	})
	return out
}

// Input returns the graph input named name.
func (r *Report) Input(name string) (ValueSummary, bool) {
	for _, v := range r.Inputs {
		if v.Name == name {
			return v, true
		}
	}
	return ValueSummary{}, false
}

// Output returns the graph output named name.
func (r *Report) Output(name string) (ValueSummary, bool) {
	for _, v := range r.Outputs {
		if v.Name == name {
			return v, true
		}
	}
	return ValueSummary{}, false
}
