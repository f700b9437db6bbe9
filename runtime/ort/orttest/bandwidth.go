package orttest

/*
#cgo CFLAGS: -O2
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// The read loop: a sum over the buffer, 128 bytes an iteration, in the
// loads the matrix kernels use — 256-bit where the CPU has AVX2, 128-bit
// NEON on arm64 — else in 64-bit words; the sum is returned so the loads
// cannot be dropped.
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t* p, size_t n) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i*)(p + i)));
    s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i*)(p + i + 32)));
    s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i*)(p + i + 64)));
    s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i*)(p + i + 96)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
  uint64_t out[4];
  _mm256_storeu_si256((__m256i*)out, s);
  return out[0] + out[1] + out[2] + out[3];
}
#endif

#if defined(__aarch64__) && defined(__GNUC__)
#include <arm_neon.h>
static uint64_t read_neon(const uint8_t* p, size_t n) {
  uint64x2_t s[8];
  for (int k = 0; k < 8; k++) s[k] = vdupq_n_u64(0);
  for (size_t i = 0; i + 128 <= n; i += 128)
    for (int k = 0; k < 8; k++) s[k] = vaddq_u64(s[k], vld1q_u64((const uint64_t*)(p + i + 16 * k)));
  for (int k = 1; k < 8; k++) s[0] = vaddq_u64(s[0], s[k]);
  return vgetq_lane_u64(s[0], 0) + vgetq_lane_u64(s[0], 1);
}
#endif

static uint64_t read_words(const uint8_t* p, size_t n) {
  const uint64_t* w = (const uint64_t*)p;
  uint64_t s[8] = {0};
  for (size_t i = 0; i + 16 <= n / 8; i += 16)
    for (int k = 0; k < 16; k++) s[k & 7] += w[i + k];
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

static uint64_t ei_read(const void* p, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2")) return read_avx2(p, n);
#elif defined(__aarch64__) && defined(__GNUC__)
  return read_neon(p, n);
#endif
  return read_words(p, n);
}
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
