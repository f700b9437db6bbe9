package abi

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	in := []Tensor{
		F32("boxes", []int64{2, 4}, []float32{0, 1, 2, 3, 4, 5, 6, math.Float32frombits(0x7fc00001)}),
		I64("n", nil, []int64{-7}),
		I32("ids", []int64{3}, []int32{1, -2, 3}),
		F64("d", []int64{1}, []float64{math.Pi}),
		Bytes("jpeg", []byte{0xff, 0xd8, 0xff}),
		Str("text", "héllo"),
		F32("empty", []int64{0, 5}, nil),
	}
	msg, out := roundTrip(t, in)
	if len(out) != len(in) {
		t.Fatalf("%d tensors back, want %d", len(out), len(in))
	}
	for i := range in {
		if out[i].Name != in[i].Name || out[i].DType != in[i].DType || !bytes.Equal(out[i].Data, in[i].Data) || len(out[i].Shape) != len(in[i].Shape) {
			t.Errorf("tensor %d: %v, want %v", i, out[i], in[i])
		}
		if len(out[i].Data) > 0 && (&out[i].Data[0] != &msg[bytes.Index(msg, in[i].Data)]) {
			t.Errorf("tensor %d data is not a view of the message", i)
		}
	}
	v, _ := out[0].Float32s()
	if v[5] != 5 || math.Float32bits(v[7]) != 0x7fc00001 {
		t.Errorf("floats %v", v)
	}
	if s, _ := out[5].Text(); s != "héllo" {
		t.Errorf("text %q", s)
	}
	if _, err := out[5].Float32s(); err == nil {
		t.Error("Float32s of a string tensor succeeded")
	}
}

func TestGuestError(t *testing.T) {
	_, err := Decode(EncodeError(nil, "bad image"))
	var ge *GuestError
	if !errors.As(err, &ge) || ge.Msg != "bad image" {
		t.Fatalf("%v", err)
	}
}

func TestMalformed(t *testing.T) {
	good := Encode(nil, []Tensor{F32("x", []int64{2}, []float32{1, 2})})
	cases := map[string][]byte{
		"empty":        nil,
		"magic":        append([]byte("XXXX"), good[4:]...),
		"count lies":   append(append([]byte{}, good[:4]...), 0xff, 0xff, 0, 0),
		"truncated":    good[:len(good)-9],
		"trailing":     append(append([]byte{}, good...), 1, 2, 3, 4, 5, 6, 7, 8),
		"error length": append(EncodeError(nil, "abc"), 'x'),
	}
	shape := append([]byte{}, good...)
	shape[8+4+1+2] = 0xff // rank byte
	cases["rank"] = shape
	for name, b := range cases {
		if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if err := Validate([]Tensor{{Name: "x", DType: Float32, Shape: []int64{3}, Data: make([]byte, 8)}}); err == nil {
		t.Error("Validate accepted 8 bytes for 3 floats")
	}
	if err := Validate([]Tensor{{Name: "x", DType: Float32, Shape: []int64{1 << 40, 1 << 40}}}); err == nil {
		t.Error("Validate accepted an overflowing shape")
	}
}

// FuzzDecode: whatever the bytes, Decode returns tensors that Validate
// accepts and that encode back to the same bytes, or an error.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(nil, []Tensor{F32("x", []int64{2}, []float32{1, 2}), Str("s", "ok")}))
	f.Add(EncodeError(nil, "nope"))
	f.Add([]byte("EIT1\x01\x00\x00\x00"))
	f.Add(Encode(nil, []Tensor{{Name: "p", DType: Float32, Shape: []int64{2, 3}, Handle: 7}, Str("s", "ok")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := Decode(b)
		if err != nil {
			return
		}
		if err := Validate(ts); err != nil {
			t.Fatalf("decoded tensors fail Validate: %v", err)
		}
		if re := Encode(nil, ts); len(re) != len(b) && len(re) != len(b)+pad8(len(b)) {
			t.Fatalf("re-encoded %d bytes from %d", len(re), len(b))
		}
	})
}

// memory is a guest's memory for the by-reference tests: 4 KiB, data at
// the address the encoder is given.
type memory []byte

func (m memory) read(addr, n uint32) ([]byte, bool) {
	if uint64(addr)+uint64(n) > uint64(len(m)) {
		return nil, false
	}
	return m[addr : addr+n], true
}

func TestRefsRoundTrip(t *testing.T) {
	mem := make(memory, 4096)
	in := []Tensor{F32("x", []int64{2, 2}, []float32{1, 2, 3, 4}), Str("s", "ok"), I64("empty", []int64{0}, nil)}
	next := uint32(64)
	addr := func(b []byte) uint32 { // place each tensor's data in mem
		a := next
		copy(mem[a:], b)
		next += uint32(len(b)+7) &^ 7
		return a
	}
	msg := EncodeRefs(nil, in, addr)
	out, err := DecodeRefs(msg, mem.read, noHeld)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 {
		t.Fatalf("%d tensors", len(out))
	}
	if v, _ := out[0].Float32s(); len(v) != 4 || v[3] != 4 {
		t.Errorf("x = %v", v)
	}
	if s, _ := out[1].Text(); s != "ok" {
		t.Errorf("s = %q", s)
	}
	// An address past the memory is refused, naming the tensor.
	bad := EncodeRefs(nil, in[:1], func([]byte) uint32 { return 4090 })
	if _, err := DecodeRefs(bad, mem.read, noHeld); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("data outside memory: %v", err)
	}
}

func FuzzDecodeRefs(f *testing.F) {
	mem := make(memory, 4096)
	f.Add(EncodeRefs(nil, []Tensor{F32("x", []int64{2}, []float32{1, 2}), Str("s", "ok")}, func([]byte) uint32 { return 8 }))
	f.Add([]byte("EIR1\x01\x00\x00\x00"))
	f.Add(EncodeRefs(nil, []Tensor{{Name: "p", DType: Float32, Shape: []int64{2, 3}, Handle: 1}}, nil))
	held := heldData{make([]byte, 24)}
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := DecodeRefs(b, mem.read, held.get)
		if err != nil {
			return
		}
		if err := Validate(ts); err != nil {
			t.Fatalf("decoded tensors fail Validate: %v", err)
		}
	})
}

func noHeld(uint32) ([]byte, bool) { return nil, false }

// heldData is what a host holds for a request: handle i+1 is d[i].
type heldData [][]byte

func (d heldData) get(h uint32) ([]byte, bool) {
	if h == 0 || int(h) > len(d) {
		return nil, false
	}
	return d[h-1], true
}

// A held tensor travels as its shape and a handle: Encode and Decode keep
// it so (no data, its byte length from the shape), the element accessors
// refuse it naming what to do, and a by-reference request resolves the
// handle through the host's table, checking its size.
func TestHeld(t *testing.T) {
	p := Tensor{Name: "p", DType: Float32, Shape: []int64{2, 3}, Handle: 1}
	_, out := roundTrip(t, []Tensor{Str("a", "x"), p, F32("q", []int64{1}, []float32{5})})
	if !out[1].Held() || out[1].Handle != 1 || len(out[1].Data) != 0 || out[1].ByteLen() != 24 {
		t.Errorf("held tensor decoded as %+v", out[1])
	}
	if v, _ := out[2].Float32s(); len(v) != 1 || v[0] != 5 {
		t.Errorf("the tensor after the held one: %v", v)
	}
	if _, err := out[1].Float32s(); err == nil || !strings.Contains(err.Error(), "held by the host") {
		t.Errorf("Float32s of a held tensor: %v", err)
	}
	// A held tensor with data besides is refused.
	if err := Validate([]Tensor{{Name: "p", DType: Float32, Shape: []int64{1}, Handle: 1, Data: make([]byte, 4)}}); err == nil {
		t.Error("Validate accepted a held tensor with data")
	}
	// Handle 0 on the wire, or an unknown flag, is malformed.
	zero := Encode(nil, []Tensor{p})
	zero[len(zero)-8] = 0
	if _, err := Decode(zero); !errors.Is(err, ErrMalformed) {
		t.Errorf("handle 0: %v", err)
	}
	flag := Encode(nil, []Tensor{p})
	flag[8+4+1+2] = 2 // count, name length, name, dtype, rank: the flags byte
	if _, err := Decode(flag); !errors.Is(err, ErrMalformed) {
		t.Errorf("flags 2: %v", err)
	}

	refs := EncodeRefs(nil, []Tensor{p}, nil)
	got, err := DecodeRefs(refs, memory(nil).read, heldData{make([]byte, 24)}.get)
	if err != nil || len(got) != 1 || got[0].Held() || len(got[0].Data) != 24 {
		t.Fatalf("by reference: %+v, %v", got, err)
	}
	for name, h := range map[string]heldData{"no such handle": nil, "another size": {make([]byte, 20)}} {
		if _, err := DecodeRefs(refs, memory(nil).read, h.get); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "handle 1") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// roundTrip encodes in, checks EncodedSize against it, and decodes it.
func roundTrip(t *testing.T, in []Tensor) ([]byte, []Tensor) {
	t.Helper()
	msg := Encode(nil, in)
	if len(msg) != EncodedSize(in) {
		t.Fatalf("encoded %d bytes, EncodedSize says %d", len(msg), EncodedSize(in))
	}
	out, err := Decode(msg)
	if err != nil {
		t.Fatal(err)
	}
	return msg, out
}
