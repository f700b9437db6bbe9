// Package plugin runs sandboxed pre- and post-processing plugins: WebAssembly
// modules shipped inside model bundles (so an over-the-air update changes a
// model and the code around it together), executed by wazero, a pure-Go
// runtime. It is the only package of the SDK that imports wazero.
//
// A plugin takes a list of named tensors (or bytes: an encoded image, a
// string) and returns a list of named tensors: "decode, resize and
// normalise this JPEG", "turn these scores and boxes into faces". The wire
// format is package abi; the exports a module provides are in ABI.md, with
// a guest kit for Go in package guest.
//
// # Sandbox
//
// Each Plugin has its own wazero runtime. By default a module sees no
// files, no network, a fake clock and a deterministic random source
// (Config.Grants opens read-only directories, the clock, crypto/rand);
// its memory is capped (Config.MemoryMB); every call is bounded by the
// request's context and Config.CallTimeout, and wazero closes the module
// when either expires (an infinite loop returns ErrTimeout within a few ms
// of the deadline: TestTimeout); an instance's start (the guest's
// _initialize) is bounded by Config.StartTimeout (TestStartLimit). A
// timeout names the plugin and the limit that fired; a module whose
// declared memory is over the cap is refused as ErrMemory. A call that traps, times out, runs out of
// memory or returns a malformed result fails alone: its instance is closed
// and the next call gets a fresh one. Everything a module returns is
// checked before use (pointer and length inside its memory, a size cap,
// the wire format; FuzzHostileResult).
//
// # Host primitives
//
// The heavy loops (image decode, resize and normalise; weighted NMS; the
// best class per row; DB text boxes) are package primitive, run natively
// and called by plugins through the import module edgeinfer_host (ABI.md):
// a guest orchestrates, the host computes, bounded by the plugin's memory
// cap and deadline (TestHostileHostCalls). The plugins shipped with the SDK
// use them; BenchmarkNMS and its siblings in runtime/plugin/plugins compare
// each with native Go. A plugin that only hands its large inputs on may ask
// for them to stay on the host (held inputs, ABI.md; guest.HoldLarge): it
// gets each input of HeldMin bytes or more as a handle, which the
// primitives read where the host keeps it (TestHeldInputs).
//
// # Engine and start-up
//
// wazero's compiler is used where the platform has one (Info.Engine says
// which ran, for the version matrix), the interpreter elsewhere. Compiling
// a Go guest (megabytes of WebAssembly) is the bulk of a start, so compiled
// code is kept in a disk cache (Config.CacheDir); BenchmarkColdStart
// (runtime/plugin/plugins) measures a start with and without it.
//
// # Why this ABI and not Extism
//
// Extism (whose Go SDK v1.7.1 also runs on wazero) moves bytes through a
// second "kernel" module with its own allocator and host functions for
// input, output, variables, HTTP and logs, and offers plugin kits in many
// languages. The SDK's plugins exchange tensors, need none of those host
// functions (each would widen the sandbox by I/O), and a pipeline calls
// them on every request. The ABI here is three exports over the module's
// own memory, with no imports beyond WASI preview 1 (which Go, Rust, C and
// Zig toolchains target directly) and the pure-computation primitives; a request and its response are one copy
// each way, tensor data 8-byte aligned so both sides view it in place.
// BenchmarkExtism and BenchmarkOurs (testdata/extismbench, a separate
// module so the SDK does not depend on Extism) measure both in one run: a
// call with 1 KiB of input to a plugin that does nothing, and an
// instance's start (both Go reactors; ours includes the ABI version
// check). BenchmarkCallOverhead (runtime/plugin/plugins) measures a call
// on its own.
package plugin
