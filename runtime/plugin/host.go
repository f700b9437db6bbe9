package plugin

import (
	"context"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/edgeinfer/edgeinfer/runtime/plugin/abi"
	"github.com/edgeinfer/edgeinfer/runtime/plugin/primitive"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// HostModule is the import module of the host primitives (ABI.md, "Host
// primitives"): call runs one primitive on tensors in the guest's memory
// and keeps its response; take copies that response into the guest.
const HostModule = "edgeinfer_host"

// hostCall is one guest call's pending primitive response and the inputs
// the host holds for it (handle i+1 is held[i]). The context of each call
// into an instance carries one (a guest is single-threaded, so a call has
// at most one pending response).
type hostCall struct {
	pending []byte
	held    [][]byte
}

type hostCallKey struct{}

func withHostCall(ctx context.Context, held [][]byte) context.Context {
	return context.WithValue(ctx, hostCallKey{}, &hostCall{held: held})
}

// data is the input held under handle h.
func (hc *hostCall) data(h uint32) ([]byte, bool) {
	if h == 0 || uint64(h) > uint64(len(hc.held)) {
		return nil, false
	}
	return hc.held[h-1], true
}

// resolve fills in the data of the held inputs ts names by handle, the
// host's own bytes or, with clone, a copy of them.
func (hc *hostCall) resolve(ts []abi.Tensor, clone bool) error {
	for i, t := range ts {
		if !t.Held() {
			continue
		}
		b, ok := hc.data(t.Handle)
		if !ok || uint64(len(b)) != t.ByteLen() {
			return fmt.Errorf("%w: tensor %q names held data (handle %d of %d bytes) this request does not hold", abi.ErrMalformed, t.Name, t.Handle, t.ByteLen())
		}
		if clone {
			b = slices.Clone(b)
		}
		ts[i].Data, ts[i].Handle = b, 0
	}
	return nil
}

// guestTrap is what a host function panics with when the guest broke the
// import's contract (memory out of range): wazero turns the panic into the
// call's error, and the instance is discarded like any trapped one.
type guestTrap struct{ msg string }

func (e guestTrap) Error() string { return HostModule + ": " + e.msg }

// instantiateHost adds the host primitives to rt. A primitive's host
// allocations are bounded by the plugin's memory cap, and its response by
// the result cap.
func (p *Plugin) instantiateHost(ctx context.Context, rt wazero.Runtime) error {
	i32 := api.ValueTypeI32
	lim := primitive.Limits{MaxBytes: int64(p.cfg.memoryBytes())}
	_, err := rt.NewHostModuleBuilder(HostModule).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, s []uint64) {
		s[0] = uint64(p.hostCall(ctx, m, uint32(s[0]), uint32(s[1]), uint32(s[2]), uint32(s[3]), lim))
	}), []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}).
		WithParameterNames("name_ptr", "name_len", "req_ptr", "req_len").Export("call").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, s []uint64) {
		s[0] = uint64(hostTake(ctx, m, uint32(s[0]), uint32(s[1])))
	}), []api.ValueType{i32, i32}, []api.ValueType{i32}).
		WithParameterNames("dst_ptr", "dst_len").Export("take").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, s []uint64) {
		s[0] = uint64(hostRead(ctx, m, uint32(s[0]), uint32(s[1]), uint32(s[2])))
	}), []api.ValueType{i32, i32, i32}, []api.ValueType{i32}).
		WithParameterNames("handle", "dst_ptr", "dst_len").Export("read").
		Instantiate(ctx)
	return err
}

// hostCall runs the primitive named at [namePtr, +nameLen) on the request
// at [reqPtr, +reqLen) (tensors inline, or by reference to the guest's
// memory) and returns the length of its response (tensors, or
// an error message for a primitive that refused its input), which take
// then copies. Out-of-range memory traps; a deadline that fires during the
// primitive ends the call with the limit that fired.
func (p *Plugin) hostCall(ctx context.Context, m api.Module, namePtr, nameLen, reqPtr, reqLen uint32, lim primitive.Limits) int32 {
	hc, _ := ctx.Value(hostCallKey{}).(*hostCall)
	if hc == nil {
		panic(guestTrap{"call outside a request"})
	}
	hc.pending = nil
	mem := m.Memory()
	name, ok := mem.Read(namePtr, nameLen)
	if !ok || nameLen > 64 || !utf8.Valid(name) {
		panic(guestTrap{fmt.Sprintf("call: primitive name at %d, %d bytes: outside memory, over 64 bytes or not UTF-8", namePtr, nameLen)})
	}
	req, ok := mem.Read(reqPtr, reqLen)
	if !ok {
		panic(guestTrap{fmt.Sprintf("call: request at %d..%d is outside the module's %d bytes of memory", reqPtr, uint64(reqPtr)+uint64(reqLen), mem.Size())})
	}
	// The request, and by-reference tensors' data, are viewed in place:
	// the guest waits in this call, so its memory does not change under
	// the primitive.
	var in []abi.Tensor
	var err error
	if abi.IsRefs(req) {
		in, err = abi.DecodeRefs(req, mem.Read, hc.data)
	} else if in, err = abi.Decode(req); err == nil {
		err = hc.resolve(in, false)
	}
	var out []abi.Tensor
	if err == nil {
		out, err = primitive.Run(ctx, string(name), in, lim)
	}
	if ctx.Err() != nil {
		panic(context.Cause(ctx))
	}
	if err == nil {
		if n := abi.EncodedSize(out); uint64(n) > uint64(p.cfg.maxResult()) || n > math.MaxInt32 {
			err = fmt.Errorf("primitive %s: response of %d bytes is over the %d MiB result cap", name, n, p.cfg.maxResult()>>20)
		} else {
			hc.pending = abi.Encode(make([]byte, 0, n), out)
		}
	}
	if err != nil {
		hc.pending = abi.EncodeError(nil, err.Error())
	}
	return int32(len(hc.pending))
}

// hostTake copies the pending response to [dst, +dstLen) and returns its
// length, or -1 when dstLen is too small (the response stays pending).
func hostTake(ctx context.Context, m api.Module, dst, dstLen uint32) int32 {
	hc, _ := ctx.Value(hostCallKey{}).(*hostCall)
	if hc == nil || hc.pending == nil {
		panic(guestTrap{"take without a call"})
	}
	if uint64(dstLen) < uint64(len(hc.pending)) {
		return -1
	}
	if !m.Memory().Write(dst, hc.pending) {
		panic(guestTrap{fmt.Sprintf("take: %d bytes at %d are outside the module's %d bytes of memory", len(hc.pending), dst, m.Memory().Size())})
	}
	n := int32(len(hc.pending))
	hc.pending = nil
	return n
}

// hostRead copies the input held under handle to [dst, +dstLen) and
// returns its length, or -1 when dstLen is too small. A handle this
// request does not have, or memory out of range, traps.
func hostRead(ctx context.Context, m api.Module, handle, dst, dstLen uint32) int32 {
	hc, _ := ctx.Value(hostCallKey{}).(*hostCall)
	if hc == nil {
		panic(guestTrap{"read outside a request"})
	}
	b, ok := hc.data(handle)
	if !ok {
		panic(guestTrap{fmt.Sprintf("read: handle %d is not one this request holds (it has %d)", handle, len(hc.held))})
	}
	if uint64(dstLen) < uint64(len(b)) || len(b) > math.MaxInt32 {
		return -1
	}
	if !m.Memory().Write(dst, b) {
		panic(guestTrap{fmt.Sprintf("read: %d bytes at %d are outside the module's %d bytes of memory", len(b), dst, m.Memory().Size())})
	}
	return int32(len(b))
}
