#include "textflag.h"

// The constants of expWeights' exponential, each in eight lanes (see
// sampling.go for the arithmetic this repeats operation for operation).
DATA expconst<>+0(SB)/4, $0xc2aeac4f
DATA expconst<>+4(SB)/4, $0xc2aeac4f
DATA expconst<>+8(SB)/4, $0xc2aeac4f
DATA expconst<>+12(SB)/4, $0xc2aeac4f
DATA expconst<>+16(SB)/4, $0xc2aeac4f
DATA expconst<>+20(SB)/4, $0xc2aeac4f
DATA expconst<>+24(SB)/4, $0xc2aeac4f
DATA expconst<>+28(SB)/4, $0xc2aeac4f
DATA expconst<>+32(SB)/4, $0x3fb8aa3b
DATA expconst<>+36(SB)/4, $0x3fb8aa3b
DATA expconst<>+40(SB)/4, $0x3fb8aa3b
DATA expconst<>+44(SB)/4, $0x3fb8aa3b
DATA expconst<>+48(SB)/4, $0x3fb8aa3b
DATA expconst<>+52(SB)/4, $0x3fb8aa3b
DATA expconst<>+56(SB)/4, $0x3fb8aa3b
DATA expconst<>+60(SB)/4, $0x3fb8aa3b
DATA expconst<>+64(SB)/4, $0x4b400000
DATA expconst<>+68(SB)/4, $0x4b400000
DATA expconst<>+72(SB)/4, $0x4b400000
DATA expconst<>+76(SB)/4, $0x4b400000
DATA expconst<>+80(SB)/4, $0x4b400000
DATA expconst<>+84(SB)/4, $0x4b400000
DATA expconst<>+88(SB)/4, $0x4b400000
DATA expconst<>+92(SB)/4, $0x4b400000
DATA expconst<>+96(SB)/4, $0x3f318000
DATA expconst<>+100(SB)/4, $0x3f318000
DATA expconst<>+104(SB)/4, $0x3f318000
DATA expconst<>+108(SB)/4, $0x3f318000
DATA expconst<>+112(SB)/4, $0x3f318000
DATA expconst<>+116(SB)/4, $0x3f318000
DATA expconst<>+120(SB)/4, $0x3f318000
DATA expconst<>+124(SB)/4, $0x3f318000
DATA expconst<>+128(SB)/4, $0xb95e8083
DATA expconst<>+132(SB)/4, $0xb95e8083
DATA expconst<>+136(SB)/4, $0xb95e8083
DATA expconst<>+140(SB)/4, $0xb95e8083
DATA expconst<>+144(SB)/4, $0xb95e8083
DATA expconst<>+148(SB)/4, $0xb95e8083
DATA expconst<>+152(SB)/4, $0xb95e8083
DATA expconst<>+156(SB)/4, $0xb95e8083
DATA expconst<>+160(SB)/4, $0x39506967
DATA expconst<>+164(SB)/4, $0x39506967
DATA expconst<>+168(SB)/4, $0x39506967
DATA expconst<>+172(SB)/4, $0x39506967
DATA expconst<>+176(SB)/4, $0x39506967
DATA expconst<>+180(SB)/4, $0x39506967
DATA expconst<>+184(SB)/4, $0x39506967
DATA expconst<>+188(SB)/4, $0x39506967
DATA expconst<>+192(SB)/4, $0x3ab743ce
DATA expconst<>+196(SB)/4, $0x3ab743ce
DATA expconst<>+200(SB)/4, $0x3ab743ce
DATA expconst<>+204(SB)/4, $0x3ab743ce
DATA expconst<>+208(SB)/4, $0x3ab743ce
DATA expconst<>+212(SB)/4, $0x3ab743ce
DATA expconst<>+216(SB)/4, $0x3ab743ce
DATA expconst<>+220(SB)/4, $0x3ab743ce
DATA expconst<>+224(SB)/4, $0x3c088908
DATA expconst<>+228(SB)/4, $0x3c088908
DATA expconst<>+232(SB)/4, $0x3c088908
DATA expconst<>+236(SB)/4, $0x3c088908
DATA expconst<>+240(SB)/4, $0x3c088908
DATA expconst<>+244(SB)/4, $0x3c088908
DATA expconst<>+248(SB)/4, $0x3c088908
DATA expconst<>+252(SB)/4, $0x3c088908
DATA expconst<>+256(SB)/4, $0x3d2aa9c1
DATA expconst<>+260(SB)/4, $0x3d2aa9c1
DATA expconst<>+264(SB)/4, $0x3d2aa9c1
DATA expconst<>+268(SB)/4, $0x3d2aa9c1
DATA expconst<>+272(SB)/4, $0x3d2aa9c1
DATA expconst<>+276(SB)/4, $0x3d2aa9c1
DATA expconst<>+280(SB)/4, $0x3d2aa9c1
DATA expconst<>+284(SB)/4, $0x3d2aa9c1
DATA expconst<>+288(SB)/4, $0x3e2aaaaa
DATA expconst<>+292(SB)/4, $0x3e2aaaaa
DATA expconst<>+296(SB)/4, $0x3e2aaaaa
DATA expconst<>+300(SB)/4, $0x3e2aaaaa
DATA expconst<>+304(SB)/4, $0x3e2aaaaa
DATA expconst<>+308(SB)/4, $0x3e2aaaaa
DATA expconst<>+312(SB)/4, $0x3e2aaaaa
DATA expconst<>+316(SB)/4, $0x3e2aaaaa
DATA expconst<>+320(SB)/4, $0x3f000000
DATA expconst<>+324(SB)/4, $0x3f000000
DATA expconst<>+328(SB)/4, $0x3f000000
DATA expconst<>+332(SB)/4, $0x3f000000
DATA expconst<>+336(SB)/4, $0x3f000000
DATA expconst<>+340(SB)/4, $0x3f000000
DATA expconst<>+344(SB)/4, $0x3f000000
DATA expconst<>+348(SB)/4, $0x3f000000
DATA expconst<>+352(SB)/4, $0x3f800000
DATA expconst<>+356(SB)/4, $0x3f800000
DATA expconst<>+360(SB)/4, $0x3f800000
DATA expconst<>+364(SB)/4, $0x3f800000
DATA expconst<>+368(SB)/4, $0x3f800000
DATA expconst<>+372(SB)/4, $0x3f800000
DATA expconst<>+376(SB)/4, $0x3f800000
DATA expconst<>+380(SB)/4, $0x3f800000
DATA expconst<>+384(SB)/4, $127
DATA expconst<>+388(SB)/4, $127
DATA expconst<>+392(SB)/4, $127
DATA expconst<>+396(SB)/4, $127
DATA expconst<>+400(SB)/4, $127
DATA expconst<>+404(SB)/4, $127
DATA expconst<>+408(SB)/4, $127
DATA expconst<>+412(SB)/4, $127
GLOBL expconst<>(SB), RODATA|NOPTR, $416

// EXPW_ARGS loads expWeights' arguments for both loops: DI the weights, SI
// the logits, CX the end of the logits.
#define EXPW_ARGS \
	MOVQ w_base+0(FP), DI \
	MOVQ x_base+24(FP), SI \
	MOVQ x_len+32(FP), CX \
	SHLQ $2, CX \
	ADDQ SI, CX

// EXPW_SUM leaves the sum of Y12's four doubles in X12's low lane.
#define EXPW_SUM \
	VEXTRACTF128 $1, Y12, X13 \
	VADDPD X13, X12, X12 \
	VPERMILPD $1, X12, X13 \
	VADDSD X13, X12, X12

// func expWeightsAVX2(w, x []float32, maxL, inv float32) float64
// expWeightsGo over len(x) logits (a multiple of 8, at least 8; w as long),
// eight at a time: the same float32 operations in the same order (no fused
// multiply-adds); the sum in float64, two accumulators.
TEXT ·expWeightsAVX2(SB), NOSPLIT, $0-64
	EXPW_ARGS
	VBROADCASTSS maxL+48(FP), Y14
	VBROADCASTSS inv+52(FP), Y15
	VXORPD Y12, Y12, Y12
	VXORPD Y13, Y13, Y13
loop:
	VMOVUPS (SI), Y2
	VSUBPS Y14, Y2, Y2
	VMULPS Y15, Y2, Y2                        // x = (l − maxL)·inv
	VCMPPS $0x1d, expconst<>+0(SB), Y2, Y4    // x ≥ −87.33654 (not NaN)
	VCMPPS $3, Y2, Y2, Y5                     // NaN
	VANDPS Y2, Y5, Y5                         // NaN where x is, else 0
	VMAXPS expconst<>+0(SB), Y2, Y6           // x, or the bound (NaN, −Inf: the bound)
	VMULPS expconst<>+32(SB), Y6, Y7
	VADDPS expconst<>+64(SB), Y7, Y7
	VSUBPS expconst<>+64(SB), Y7, Y7          // n = round(x·log2 e)
	VMULPS expconst<>+96(SB), Y7, Y8
	VSUBPS Y8, Y6, Y8                         // r = x − n·0.693359375
	VMULPS expconst<>+128(SB), Y7, Y9
	VSUBPS Y9, Y8, Y8                         // r −= n·−2.12194440e−4
	VMOVUPS expconst<>+160(SB), Y9
	VMULPS Y8, Y9, Y9
	VADDPS expconst<>+192(SB), Y9, Y9
	VMULPS Y8, Y9, Y9
	VADDPS expconst<>+224(SB), Y9, Y9
	VMULPS Y8, Y9, Y9
	VADDPS expconst<>+256(SB), Y9, Y9
	VMULPS Y8, Y9, Y9
	VADDPS expconst<>+288(SB), Y9, Y9
	VMULPS Y8, Y9, Y9
	VADDPS expconst<>+320(SB), Y9, Y9         // the polynomial p
	VMULPS Y8, Y9, Y9
	VMULPS Y8, Y9, Y9
	VADDPS Y8, Y9, Y9
	VADDPS expconst<>+352(SB), Y9, Y9         // p·r·r + r + 1
	VCVTTPS2DQ Y7, Y10
	VPADDD expconst<>+384(SB), Y10, Y10
	VPSLLD $23, Y10, Y10                      // 2^n
	VMULPS Y10, Y9, Y9
	VBLENDVPS Y4, Y9, Y5, Y9                  // in range: e; else 0, or NaN
	VMOVUPS Y9, (DI)
	VCVTPS2PD X9, Y6
	VADDPD Y6, Y12, Y12
	VEXTRACTF128 $1, Y9, X7
	VCVTPS2PD X7, Y7
	VADDPD Y7, Y13, Y13
	ADDQ $32, SI
	ADDQ $32, DI
	CMPQ SI, CX
	JB loop
	VADDPD Y13, Y12, Y12
	EXPW_SUM
	VMOVSD X12, ret+56(FP)
	VZEROUPPER
	RET

// func expWeightsAVX512(w, x []float32, maxL, inv float32) float64
// expWeightsAVX2 sixteen lanes at a time (len(x) a multiple of 16, at least
// 16): the same operations, each constant broadcast from its first lane,
// the masks in K registers; the sum in float64, two accumulators of eight.
TEXT ·expWeightsAVX512(SB), NOSPLIT, $0-64
	EXPW_ARGS
	VBROADCASTSS maxL+48(FP), Z14
	VBROADCASTSS inv+52(FP), Z15
	VXORPD Z12, Z12, Z12
	VXORPD Z13, Z13, Z13
loop512:
	VMOVUPS (SI), Z2
	VSUBPS Z14, Z2, Z2
	VMULPS Z15, Z2, Z2                              // x = (l − maxL)·inv
	VCMPPS.BCST $0x1d, expconst<>+0(SB), Z2, K1     // x ≥ −87.33654 (not NaN)
	VCMPPS $3, Z2, Z2, K2                           // NaN
	VXORPS Z5, Z5, Z5
	VMOVAPS Z2, K2, Z5                              // NaN where x is, else 0
	VMAXPS.BCST expconst<>+0(SB), Z2, Z6            // x, or the bound (NaN, −Inf: the bound)
	VMULPS.BCST expconst<>+32(SB), Z6, Z7
	VADDPS.BCST expconst<>+64(SB), Z7, Z7
	VSUBPS.BCST expconst<>+64(SB), Z7, Z7           // n = round(x·log2 e)
	VMULPS.BCST expconst<>+96(SB), Z7, Z8
	VSUBPS Z8, Z6, Z8                               // r = x − n·0.693359375
	VMULPS.BCST expconst<>+128(SB), Z7, Z9
	VSUBPS Z9, Z8, Z8                               // r −= n·−2.12194440e−4
	VBROADCASTSS expconst<>+160(SB), Z9
	VMULPS Z8, Z9, Z9
	VADDPS.BCST expconst<>+192(SB), Z9, Z9
	VMULPS Z8, Z9, Z9
	VADDPS.BCST expconst<>+224(SB), Z9, Z9
	VMULPS Z8, Z9, Z9
	VADDPS.BCST expconst<>+256(SB), Z9, Z9
	VMULPS Z8, Z9, Z9
	VADDPS.BCST expconst<>+288(SB), Z9, Z9
	VMULPS Z8, Z9, Z9
	VADDPS.BCST expconst<>+320(SB), Z9, Z9          // the polynomial p
	VMULPS Z8, Z9, Z9
	VMULPS Z8, Z9, Z9
	VADDPS Z8, Z9, Z9
	VADDPS.BCST expconst<>+352(SB), Z9, Z9          // p·r·r + r + 1
	VCVTTPS2DQ Z7, Z10
	VPADDD.BCST expconst<>+384(SB), Z10, Z10
	VPSLLD $23, Z10, Z10                            // 2^n
	VMULPS Z10, Z9, Z9
	VBLENDMPS Z9, Z5, K1, Z9                        // in range: e; else 0, or NaN
	VMOVUPS Z9, (DI)
	VCVTPS2PD Y9, Z6
	VADDPD Z6, Z12, Z12
	VEXTRACTF64X4 $1, Z9, Y7
	VCVTPS2PD Y7, Z7
	VADDPD Z7, Z13, Z13
	ADDQ $64, SI
	ADDQ $64, DI
	CMPQ SI, CX
	JB loop512
	VADDPD Z13, Z12, Z12
	VEXTRACTF64X4 $1, Z12, Y13
	VADDPD Y13, Y12, Y12
	EXPW_SUM
	VMOVSD X12, ret+56(FP)
	VZEROUPPER
	RET
