package plugin

// A hand-assembled module for the cases Go cannot produce on purpose (an
// `unreachable` trap, a response pointer past memory, a raw memory.grow
// loop): each test supplies the body of edgeinfer_run, the rest is the ABI.

func uleb(v uint64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, b|0x80)
			continue
		}
		return append(out, b)
	}
}

func section(id byte, body ...[]byte) []byte {
	var b []byte
	for _, p := range body {
		b = append(b, p...)
	}
	return append(append([]byte{id}, uleb(uint64(len(b)))...), b...)
}

func name(s string) []byte { return append(uleb(uint64(len(s))), s...) }

func fn(code ...byte) []byte {
	body := append([]byte{0}, code...) // no locals
	return append(uleb(uint64(len(body))), body...)
}

// rawModule exports memory (1 page, growable), edgeinfer_abi_version
// (1), edgeinfer_alloc (returns 1024) and edgeinfer_run with the given
// body (params ptr, len; result i64).
func rawModule(run ...byte) []byte { return rawModuleInit(nil, run...) }

// rawModuleInit is rawModule with an _initialize export whose body is init
// (none when nil).
func rawModuleInit(init []byte, run ...byte) []byte {
	const i32, i64 = 0x7f, 0x7e
	nf := 3
	typeList := [][]byte{{0x60, 0, 1, i32}, {0x60, 1, i32, 1, i32}, {0x60, 2, i32, i32, 1, i64}}
	funcList := []byte{0, 1, 2}
	exportList := [][]byte{name("memory"), {2, 0}, name("edgeinfer_abi_version"), {0, 0},
		name("edgeinfer_alloc"), {0, 1}, name("edgeinfer_run"), {0, 2}}
	bodies := [][]byte{fn(0x41, 1, 0x0b), fn(0x41, 0x80, 0x08, 0x0b), fn(run...)}
	if init != nil {
		nf++
		typeList = append(typeList, []byte{0x60, 0, 0})
		funcList = append(funcList, 3)
		exportList = append(exportList, name("_initialize"), []byte{0, 3})
		bodies = append(bodies, fn(init...))
	}
	vec := func(n int, items ...[]byte) [][]byte { return append([][]byte{uleb(uint64(n))}, items...) }
	types := section(1, vec(len(typeList), typeList...)...)
	funcs := section(3, uleb(uint64(nf)), funcList)
	mem := section(5, uleb(1), []byte{0, 1})
	exports := section(7, vec(len(exportList)/2, exportList...)...)
	code := section(10, vec(nf, bodies...)...)
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	for _, s := range [][]byte{types, funcs, mem, exports, code} {
		out = append(out, s...)
	}
	return out
}

var (
	// unreachable
	runUnreachable = []byte{0x00, 0x0b}
	// return the i64 stored at address 0 (the fuzz test writes it)
	runFromMemory = []byte{0x41, 0, 0x29, 3, 0, 0x0b}
	// loop { br 0 }; unreachable
	runLoop = []byte{0x03, 0x40, 0x0c, 0, 0x0b, 0x00, 0x0b}
	// loop { br 0 } (an _initialize that never returns)
	initLoop = []byte{0x03, 0x40, 0x0c, 0, 0x0b, 0x0b}
	// loop { memory.grow(16) != -1 ? br 0 }; return 0
	runGrow = []byte{0x03, 0x40, 0x41, 0x10, 0x40, 0, 0x41, 0x7f, 0x47, 0x0d, 0, 0x0b, 0x42, 0, 0x0b}
)
