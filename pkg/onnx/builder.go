package onnx

import (
	"fmt"
	"io"
	"strconv"

	"google.golang.org/protobuf/proto"
)

// Operator set domains.
const (
	// DomainONNX is the default ONNX domain (the empty string).
	DomainONNX = ""
	// DomainMicrosoft holds ONNX Runtime's contrib operators
	// (RotaryEmbedding, FusedMatMul, GroupQueryAttention, MatMulNBits, …).
	DomainMicrosoft = "com.microsoft"
	// DomainEdgeInfer holds edgeinfer's own ONNX Runtime kernels, which
	// runtime/ort registers with every session (its OpDomain).
	DomainEdgeInfer = "ai.edgeinfer"
)

// Defaults of a new Builder: IR 8 with opset 17, which ONNX Runtime 1.30
// loads alongside com.microsoft opset 1 (see the package documentation).
const (
	DefaultIRVersion = 8
	DefaultOpset     = 17
)

// Dim is one dimension of a graph input or output: a fixed size, or a
// symbolic name such as "batch" when Param is set.
type Dim struct {
	Value int64
	Param string
}

// Fixed returns a dimension of known size.
func Fixed(n int64) Dim { return Dim{Value: n} }

// Sym returns a symbolic dimension.
func Sym(name string) Dim { return Dim{Param: name} }

// Builder assembles one ONNX model. Methods record the first error and turn
// later calls into no-ops, so graph code reads straight; Model and Marshal
// return that error. A Builder is not safe for concurrent use.
type Builder struct {
	model *ModelProto
	graph *GraphProto
	names map[string]struct{} // every value name defined so far
	seq   int
	ext   *externalWriter
	err   error
}

// NewBuilder returns a builder for a model whose graph is called name, with
// IR version DefaultIRVersion and the default domain at DefaultOpset.
func NewBuilder(name string) *Builder {
	g := &GraphProto{Name: proto.String(name)}
	m := &ModelProto{
		IrVersion:   proto.Int64(DefaultIRVersion),
		Graph:       g,
		OpsetImport: []*OperatorSetIdProto{{Domain: proto.String(DomainONNX), Version: proto.Int64(DefaultOpset)}},
	}
	return &Builder{model: m, graph: g, names: map[string]struct{}{}}
}

// Err returns the first error recorded, if any.
func (b *Builder) Err() error { return b.err }

func (b *Builder) fail(format string, args ...any) {
	if b.err == nil {
		b.err = fmt.Errorf("%w: "+format, append([]any{ErrBuild}, args...)...)
	}
}

// SetProducer records the producing tool in the model.
func (b *Builder) SetProducer(name, version string) {
	b.model.ProducerName = proto.String(name)
	b.model.ProducerVersion = proto.String(version)
}

// Metadata adds a key/value pair to the model's metadata_props.
func (b *Builder) Metadata(key, value string) {
	b.model.MetadataProps = append(b.model.MetadataProps,
		&StringStringEntryProto{Key: proto.String(key), Value: proto.String(value)})
}

// Opset imports domain at version, replacing an earlier import of it.
func (b *Builder) Opset(domain string, version int64) {
	for _, o := range b.model.OpsetImport {
		if o.GetDomain() == domain {
			o.Version = proto.Int64(version)
			return
		}
	}
	b.model.OpsetImport = append(b.model.OpsetImport,
		&OperatorSetIdProto{Domain: proto.String(domain), Version: proto.Int64(version)})
}

// Fresh returns an unused value name starting with prefix.
func (b *Builder) Fresh(prefix string) string {
	for {
		b.seq++
		n := prefix + "_" + strconv.Itoa(b.seq)
		if _, used := b.names[n]; !used {
			return n
		}
	}
}

// define claims name for a value; a second definition is an error because
// ONNX graphs are in SSA form.
func (b *Builder) define(name string) {
	if name == "" {
		b.fail("empty value name")
		return
	}
	if _, dup := b.names[name]; dup {
		b.fail("value %q defined twice", name)
		return
	}
	b.names[name] = struct{}{}
}

func valueInfo(name string, dt TensorProto_DataType, dims []Dim) *ValueInfoProto {
	shape := &TensorShapeProto{}
	for _, d := range dims {
		dim := &TensorShapeProto_Dimension{}
		if d.Param != "" {
			dim.Value = &TensorShapeProto_Dimension_DimParam{DimParam: d.Param}
		} else {
			dim.Value = &TensorShapeProto_Dimension_DimValue{DimValue: d.Value}
		}
		shape.Dim = append(shape.Dim, dim)
	}
	return &ValueInfoProto{
		Name: proto.String(name),
		Type: &TypeProto{Value: &TypeProto_TensorType{TensorType: &TypeProto_Tensor{
			ElemType: proto.Int32(int32(dt)),
			Shape:    shape,
		}}},
	}
}

// Input declares a graph input and returns its name.
func (b *Builder) Input(name string, dt TensorProto_DataType, dims ...Dim) string {
	if b.err != nil {
		return name
	}
	b.define(name)
	b.graph.Input = append(b.graph.Input, valueInfo(name, dt, dims))
	return name
}

// Output declares a graph output. Some node must produce a value of that
// name (give it as an explicit output to Node).
func (b *Builder) Output(name string, dt TensorProto_DataType, dims ...Dim) {
	if b.err != nil {
		return
	}
	b.graph.Output = append(b.graph.Output, valueInfo(name, dt, dims))
}

// Node adds a node of domain and opType. An empty output name is replaced by
// a fresh one; the outputs are returned. Use "" in inputs for an omitted
// optional input.
func (b *Builder) Node(domain, opType string, inputs, outputs []string, attrs ...*AttributeProto) []string {
	outs := make([]string, len(outputs))
	if b.err != nil {
		return outs
	}
	for _, in := range inputs {
		if in == "" {
			continue
		}
		if _, ok := b.names[in]; !ok {
			b.fail("%s node reads undefined value %q", opType, in)
			return outs
		}
	}
	for i, o := range outputs {
		if o == "" {
			o = b.Fresh(opType)
		}
		b.define(o)
		outs[i] = o
	}
	b.graph.Node = append(b.graph.Node, &NodeProto{
		Name:      proto.String(b.Fresh("n_" + opType)),
		OpType:    proto.String(opType),
		Domain:    proto.String(domain),
		Input:     inputs,
		Output:    outs,
		Attribute: attrs,
	})
	return outs
}

// Op adds a node of the default domain with one fresh output and returns it.
func (b *Builder) Op(opType string, inputs []string, attrs ...*AttributeProto) string {
	return b.Node(DomainONNX, opType, inputs, []string{""}, attrs...)[0]
}

// MS adds a com.microsoft node with one fresh output and returns it.
func (b *Builder) MS(opType string, inputs []string, attrs ...*AttributeProto) string {
	return b.Node(DomainMicrosoft, opType, inputs, []string{""}, attrs...)[0]
}

// Model returns the assembled model, or the first error recorded.
func (b *Builder) Model() (*ModelProto, error) {
	if b.err != nil {
		return nil, b.err
	}
	// What the graph defines now, not what the builder defined: a pass may
	// have rewritten the graph in place since (pkg/onnx/llama's
	// SetMatMulKernel adds a node output that is a graph output, and drops
	// nodes).
	defined := map[string]bool{}
	for _, v := range b.graph.GetInput() {
		defined[v.GetName()] = true
	}
	for _, t := range b.graph.GetInitializer() {
		defined[t.GetName()] = true
	}
	for _, n := range b.graph.GetNode() {
		for _, o := range n.GetOutput() {
			defined[o] = o != ""
		}
	}
	for _, o := range b.graph.Output {
		if !defined[o.GetName()] {
			return nil, fmt.Errorf("%w: output %q is produced by no node", ErrBuild, o.GetName())
		}
	}
	return b.model, nil
}

// Marshal returns the model's protobuf encoding. Protobuf caps one message
// at 2 GiB: larger models need SetExternalData.
func (b *Builder) Marshal() ([]byte, error) {
	m, err := b.Model()
	if err != nil {
		return nil, err
	}
	out, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: marshal: %v", ErrBuild, err)
	}
	return out, nil
}

// WriteTo writes the marshalled model to w.
func (b *Builder) WriteTo(w io.Writer) (int64, error) {
	data, err := b.Marshal()
	if err != nil {
		return 0, err
	}
	n, err := w.Write(data)
	return int64(n), err
}
