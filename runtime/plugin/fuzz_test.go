package plugin

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
)

// FuzzHostileResult plays a hostile plugin: the response's address and
// length and the bytes at that address are the fuzzer's. The host must
// return tensors that Validate accepts or one of the package's errors,
// never panic, and keep serving.
func FuzzHostileResult(f *testing.F) {
	good := abi.Encode(nil, []abi.Tensor{abi.F32("x", []int64{1, 2}, []float32{1, 2}), abi.Str("s", "ok")})
	f.Add(uint32(64), uint32(len(good)), good)
	f.Add(uint32(64), uint32(12), abi.EncodeError(nil, "oops"))
	f.Add(uint32(65530), uint32(64), good)
	f.Add(uint32(0xffffffff), uint32(0xffffffff), []byte{})
	f.Add(uint32(64), uint32(8), []byte("EIT1\xff\xff\xff\xff"))
	p, err := Load(context.Background(), "fuzz", rawModule(runFromMemory...), Config{CacheDir: "-", MaxInstances: 1, MemoryMB: 1, CallTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = p.Close(context.Background()) })
	f.Fuzz(func(t *testing.T, ptr, length uint32, body []byte) {
		if len(body) > 60000 {
			body = body[:60000]
		}
		var in *instance
		select {
		case in = <-p.idle:
		default:
			if in, err = p.instantiate(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		var packed [8]byte
		binary.LittleEndian.PutUint64(packed[:], uint64(ptr)<<32|uint64(length))
		in.mem.Write(0, packed[:])
		in.mem.Write(64, body)
		p.idle <- in
		out, err := p.CallRaw(context.Background(), abi.Encode(nil, nil))
		switch {
		case err == nil:
			if verr := abi.Validate(out); verr != nil {
				t.Fatalf("accepted a response Validate refuses: %v", verr)
			}
		case errors.Is(err, ErrResult), errors.Is(err, ErrGuest):
		default:
			t.Fatalf("unexpected error kind: %v", err)
		}
	})
}
