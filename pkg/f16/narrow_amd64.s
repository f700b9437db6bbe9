#include "textflag.h"

// func narrowF16C(dst []uint16, src []float32) int
// Eight float32 at a time to binary16 (VCVTPS2PH, imm 0: to nearest, ties
// to even, whatever MXCSR says), stopping before eight that hold a NaN
// (VCMPPS unordered with itself). len(src) is a multiple of 8 and dst at
// least as long.
TEXT ·narrowF16C(SB), NOSPLIT, $0-56
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	XORQ AX, AX
loop:
	CMPQ AX, CX
	JAE done
	VMOVUPS (SI)(AX*4), Y0
	VCMPPS $3, Y0, Y0, Y1
	VPTEST Y1, Y1
	JNZ done
	VCVTPS2PH $0, Y0, X2
	VMOVDQU X2, (DI)(AX*2)
	ADDQ $8, AX
	JMP loop
done:
	MOVQ AX, ret+48(FP)
	VZEROUPPER
	RET
