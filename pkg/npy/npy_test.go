package npy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, shape := range [][]int64{{4}, {1, 3, 2, 2}, {}} {
		a := Array{Shape: shape}
		n := int(a.Len())
		in := make([]float32, n)
		for i := range in {
			in[i] = float32(i) - 1.5
		}
		raw := EncodeFloat32(shape, in)
		if (10+int(raw[8])+int(raw[9])<<8)%64 != 0 {
			t.Fatalf("header not 64-aligned")
		}
		out, err := Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		got, err := out.Float32()
		if err != nil || !slices.Equal(out.Shape, shape) || !slices.Equal(got, in) {
			t.Fatalf("shape %v values %v (%v), want %v %v", out.Shape, got, err, shape, in)
		}
	}
}

// npy writes a header the way NumPy does, for dtypes Encode would refuse.
func npy(descr, shape string, data []byte) []byte {
	h := "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }"
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	b := []byte("\x93NUMPY\x01\x00")
	b = append(b, byte(len(h)), byte(len(h)>>8))
	return append(append(b, h...), data...)
}

func TestParseTypes(t *testing.T) {
	a, err := Parse(npy("<i8", "2,", make([]byte, 16)))
	if err != nil || a.Descr != "<i8" || !slices.Equal(a.Shape, []int64{2}) || len(a.Data) != 16 {
		t.Fatalf("int64: %+v %v", a, err)
	}
	if _, err := a.Float32(); !errors.Is(err, ErrFormat) {
		t.Errorf("Float32 of int64: %v", err)
	}
	if a, err := Parse(npy("|b1", "", []byte{1})); err != nil || a.Len() != 1 {
		t.Fatalf("bool scalar: %+v %v", a, err)
	}
}

func TestParseRejects(t *testing.T) {
	good := EncodeFloat32([]int64{2}, []float32{1, 2})
	for name, tc := range map[string]struct {
		raw  []byte
		want string
	}{
		"magic":   {[]byte("NUMPY\x01\x00\x00\x00xx"), "magic"},
		"version": {[]byte("\x93NUMPY\x04\x00\x00\x00"), "version 4"},
		"header":  {[]byte("\x93NUMPY\x01\x00\xff\xff"), "header of 65535 bytes"},
		"dtype":   {npy("<c8", "1,", make([]byte, 8)), `dtype "<c8"`},
		"big":     {npy(">f4", "1,", make([]byte, 4)), `dtype ">f4"`},
		"order":   {[]byte(strings.Replace(string(good), "False", "True ", 1)), "Fortran"},
		"short":   {good[:len(good)-1], "7 data bytes"},
		"long":    {append(slices.Clone(good), 0), "9 data bytes"},
		"shape":   {npy("<f4", "-1,", nil), "shape"},
		"huge":    {npy("<f4", "65536, 65536", nil), "over"},
	} {
		_, err := Parse(tc.raw)
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrFormat saying %q", name, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(EncodeFloat32([]int64{1, 2}, []float32{1, 2}))
	f.Add(npy("<i8", "", make([]byte, 8)))
	f.Add(npy("|u1", "2, 3", make([]byte, 6)))
	f.Add([]byte("\x93NUMPY\x02\x00\xff\xff\xff\x7f"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, err := Parse(raw)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v is not ErrFormat", err)
			}
			return
		}
		// Whatever parses is consistent and writes back to the same array.
		if int64(len(a.Data)) != a.Len()*int64(ItemSize[a.Descr]) || a.Len() > MaxElements {
			t.Fatalf("%d bytes for %v of %s", len(a.Data), a.Shape, a.Descr)
		}
		again, err := Encode(a)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Parse(again)
		if err != nil || b.Descr != a.Descr || !slices.Equal(b.Shape, a.Shape) || string(b.Data) != string(a.Data) {
			t.Fatalf("re-encoded %+v -> %+v, %v", a, b, err)
		}
	})
}
