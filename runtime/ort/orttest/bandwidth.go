package orttest

/*
#cgo CFLAGS: -O2
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "readloop.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// ReadBandwidth is the best of three passes of threads OS threads each
// reading its share of a 256 MiB buffer (C, 256-bit loads on AVX2, 128-bit
// on arm64), in bytes per second: the memory read bandwidth a decode
// step's weight stream can reach on those threads, measured beside the
// benchmark that needs it (a shared machine's bandwidth swings within
// minutes).
func ReadBandwidth(threads int) float64 {
	const size = 256 << 20
	raw := C.malloc(size + 64)
	defer C.free(raw)
	base := unsafe.Pointer((uintptr(raw) + 63) &^ 63)
	buf := unsafe.Slice((*byte)(base), size)
	for i := range buf {
		buf[i] = byte(i)
	}
	per := size / threads &^ 127
	best := 0.0
	var sink uint64
	for range 3 {
		var wg sync.WaitGroup
		sums := make([]uint64, threads)
		start := time.Now()
		for w := range threads {
			wg.Go(func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				sums[w] = uint64(C.ei_read(unsafe.Pointer(&buf[w*per]), C.size_t(per)))
			})
		}
		wg.Wait()
		best = max(best, float64(per*threads)/time.Since(start).Seconds())
		for _, s := range sums {
			sink += s
		}
	}
	_ = sink
	return best
}
