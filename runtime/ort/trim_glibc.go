//go:build linux && cgo

package ort

/*
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
static void edgeinfer_trim(void) { malloc_trim(0); }
static void edgeinfer_pin_mmap(void) { mallopt(M_MMAP_THRESHOLD, 128 * 1024); }
#else
static void edgeinfer_trim(void) {}
static void edgeinfer_pin_mmap(void) {}
#endif
*/
import "C"

import "sync"

// trimHeap hands the C heap's free memory back to the kernel (glibc's
// malloc_trim; a no-op with other C libraries). A closed session's memory
// would otherwise stay resident in malloc's free lists: memory the device
// does not get back, and that the next session reuses without collapseNew
// seeing it become resident (TestSessionHugePages checks that the session
// created after a closed one has its memory collapsed).
func trimHeap() { C.edgeinfer_trim() }

var pinOnce sync.Once

// pinMmapThreshold fixes glibc's mmap threshold at its default, 128 KiB,
// once for the process, before the first session is created: every block
// above it — a session's weights, its arena's regions — is then a mapping
// of its own, unmapped when freed. By default glibc raises the threshold to
// the largest block freed (up to 32 MiB) and the trim threshold to twice
// that, so after one session closes the next one's weights come from a
// thread's malloc arena, whose free top malloc_trim never returns: resident
// before the session is created, so never collapsed into huge pages (the
// session after a closed one got 0 MiB in 13 of 100 runs of
// TestSessionHugePages; 0 of 100 with the threshold fixed), and memory a
// device did not get back after a model swap. The cost, a fresh mapping for
// each large block malloc'd while running, is kept off the step: the
// operators take their large scratch from ONNX Runtime's arena (ops.c,
// scratch_get). A no-op with other C libraries.
func pinMmapThreshold() { pinOnce.Do(func() { C.edgeinfer_pin_mmap() }) }
