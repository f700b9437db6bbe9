// Instruction sets a process switches off for edgeinfer's kernels, beside
// what the CPU reports: the kernels pick their variants (matmul_q4.c,
// paged_attention.c) from what the CPU runs less these. customops.go
// derives them from golang.org/x/sys/cpu, so that GODEBUG=cpu.<name>=off
// (the Go runtime's switch) reaches the kernels as it reaches Go's own
// vector code: a developer runs the kernels of a CPU without AVX-512 on
// one that has it.
#ifndef EDGEINFER_CPU_H
#define EDGEINFER_CPU_H

#define EI_CPU_AVX2 1u     // cpu.avx2, cpu.fma or cpu.f16c off: nothing above generic C
#define EI_CPU_AVXVNNI 2u  // cpu.avxvnni off
#define EI_CPU_AVX512 4u   // cpu.avx512f, avx512bw, avx512vl, avx512dq or avx512cd off: x86-64-v4's code
#define EI_CPU_AVX512VNNI 16u  // cpu.avx512vnni off (the int4/int8 products' 512-bit tile needs it too)
#define EI_CPU_DOTPROD 8u  // cpu.asimddp off (arm64)

#endif
