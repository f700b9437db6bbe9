package onnx

import (
	"fmt"
	"io"
	"strconv"

	"google.golang.org/protobuf/proto"
)

// externalAlign aligns each tensor in the data file to a page, so ONNX
// Runtime can map tensors instead of reading them.
const externalAlign = 4096

// externalWriter appends tensors to one external data file.
type externalWriter struct {
	w         io.Writer
	location  string
	threshold int
	offset    int64
}

// SetExternalData makes every later initializer of at least threshold bytes
// go to w, a file that will sit beside the model as location (a path
// relative to the model file, e.g. "model.onnx.data"), instead of into the
// model proto. The tensor is written at once and not retained, so a model
// larger than memory or than protobuf's 2 GiB limit can be built. The caller
// owns w: flush and close it after Model/Marshal.
func (b *Builder) SetExternalData(w io.Writer, location string, threshold int) {
	if threshold < 1 {
		threshold = 1
	}
	b.ext = &externalWriter{w: w, location: location, threshold: threshold}
}

// ExternalBytes returns the number of bytes written to external data so far.
func (b *Builder) ExternalBytes() int64 {
	if b.ext == nil {
		return 0
	}
	return b.ext.offset
}

var zeroPage [externalAlign]byte

func (e *externalWriter) write(raw []byte) ([]*StringStringEntryProto, error) {
	if pad := (externalAlign - e.offset%externalAlign) % externalAlign; pad > 0 {
		if _, err := e.w.Write(zeroPage[:pad]); err != nil {
			return nil, fmt.Errorf("write external data: %w", err)
		}
		e.offset += pad
	}
	if _, err := e.w.Write(raw); err != nil {
		return nil, fmt.Errorf("write external data: %w", err)
	}
	off := e.offset
	e.offset += int64(len(raw))
	kv := func(k, v string) *StringStringEntryProto {
		return &StringStringEntryProto{Key: proto.String(k), Value: proto.String(v)}
	}
	return []*StringStringEntryProto{
		kv("location", e.location),
		kv("offset", strconv.FormatInt(off, 10)),
		kv("length", strconv.FormatInt(int64(len(raw)), 10)),
	}, nil
}
