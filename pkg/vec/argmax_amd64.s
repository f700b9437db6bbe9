#include "textflag.h"

// func maxAVX2(x []float32) float32
// The largest value of x (len a multiple of 32, at least 32), in four
// accumulators of eight lanes: each VMAXPS keeps the accumulator where the
// element is NaN (its second source is the one returned then), as
// argmaxGeneric's v > m does.
TEXT ·maxAVX2(SB), NOSPLIT, $0-28
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	MOVL $0xff800000, AX // −Inf
	MOVL AX, X0
	VBROADCASTSS X0, Y0
	VMOVAPS Y0, Y1
	VMOVAPS Y0, Y2
	VMOVAPS Y0, Y3
	SHLQ $2, CX
	ADDQ SI, CX
loop:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VMAXPS Y0, Y4, Y0
	VMAXPS Y1, Y5, Y1
	VMAXPS Y2, Y6, Y2
	VMAXPS Y3, Y7, Y3
	ADDQ $128, SI
	CMPQ SI, CX
	JB loop
	VMAXPS Y1, Y0, Y0
	VMAXPS Y3, Y2, Y2
	VMAXPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X1, X0, X0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func indexAVX2(x []float32, v float32) int
// The first index of x (len a multiple of 8) holding v, or −1.
TEXT ·indexAVX2(SB), NOSPLIT, $0-40
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	VBROADCASTSS v+24(FP), Y1
	XORQ DX, DX
	TESTQ CX, CX
	JZ none
next:
	VCMPPS $0, (SI)(DX*4), Y1, Y2 // equal (ordered, quiet)
	VMOVMSKPS Y2, AX
	TESTL AX, AX
	JNZ found
	ADDQ $8, DX
	CMPQ DX, CX
	JB next
none:
	MOVQ $-1, ret+32(FP)
	VZEROUPPER
	RET
found:
	BSFL AX, AX
	ADDQ AX, DX
	MOVQ DX, ret+32(FP)
	VZEROUPPER
	RET
