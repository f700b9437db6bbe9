//go:build linux && cgo

package ort

/*
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
static void edgeinfer_trim(void) { malloc_trim(0); }
#else
static void edgeinfer_trim(void) {}
#endif
*/
import "C"

// trimHeap hands the C heap's free memory back to the kernel (glibc's
// malloc_trim; a no-op with other C libraries). A closed session's memory
// would otherwise stay resident in malloc's free lists: memory the device
// does not get back, and that the next session reuses without collapseNew
// seeing it become resident (TestSessionHugePages checks that the session
// created after a closed one has its memory collapsed).
func trimHeap() { C.edgeinfer_trim() }
