// dqgen standalone dequantize kernel for spec "gptq_uint2_asym_fp16" (u2 -> fp16), generated.
// Do not edit: `dqgen build specs/gptq_uint2_asym_fp16.yaml` regenerates it.
//   qweight [K/16, N] int32 (packed along K), scales [G, N] fp16, qzeros [G, N/16] int32 (gptq_v2),
//   out [K, N] fp16 row-major; G = K / group_size (1 when group_size == -1).
// Index arithmetic is 64-bit throughout; any shape the packing allows is handled (tails are guarded).
// Entry points dqgen_gptq_uint2_asym_fp16_v<VEC>_r<ROWS>[_u]: each thread converts ROWS rows x VEC words, all of
// its loads issued before any conversion (memory-level parallelism), one scale/zero-point preparation
// per group; "_u" variants make only 4-byte accesses, for base pointers that are not 16-byte aligned.

// dqgen device converter for spec "gptq_uint2_asym_fp16" (u2 -> fp16), generated from its Plan.
// Do not edit: `dqgen build specs/gptq_uint2_asym_fp16.yaml` regenerates it.
//
// Input word: 16 codes of 2 bits; field j holds element order[j], order = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15].
// value = fp16( (q - z) * s ), rounded once to nearest-even.
// Plan: lanes; 12 conversion ops per 8 outputs, 24 zero-point ops per zero word.
// Proof: every code at every lane with every zero point and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: gptq_v2.
// Requires sm_53 or newer. Outputs are fp16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace gptq_uint2_asym_fp16 {

[[maybe_unused]] constexpr int kBits = 2;
[[maybe_unused]] constexpr int kPerWord = 16;
[[maybe_unused]] constexpr int kPairs = 8;
[[maybe_unused]] constexpr int kZeroRegs = 8;

// Once per (group, zero word): the zero points of this word's 16 columns, prepared so
// that the conversion subtracts magic and zero point in one op.
__device__ __forceinline__ void prepare_zeros(unsigned z, unsigned* zr) {
    unsigned zp0, zr0, zc0, zp1, zr1, zc1, zp2, zr2, zc2, zp3, zr3, zc3, zp4, zr4, zc4, zp5, zr5, zc5, zp6, zr6, zc6, zp7, zr7, zc7;
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 0, 0] (result byte k <- source byte picks[k]; 0-3 = z, 4-7 = z)
    asm("prmt.b32 %0, %1, %2, 0x0;" : "=r"(zp0) : "r"(z), "r"(z));
    // 1024 + z*2^p in each half
    // 0x000C0003: mask: the 2-bit fields at bit 0 of the low half and bit 2 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr0) : "r"(zp0), "r"(0x000C0003u), "r"(0x64006400u));
    // -(1024/2^p + z): the fma addend that removes magic and zero at once (exact)
    // 0xB400BC00: -1/2^p per half
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(zc0) : "r"(zr0), "r"(0xB400BC00u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 0, 0] (result byte k <- source byte picks[k]; 0-3 = z, 4-7 = z)
    asm("prmt.b32 %0, %1, %2, 0x0;" : "=r"(zp1) : "r"(z), "r"(z));
    // 1024 + z*2^p in each half
    // 0x00C00030: mask: the 2-bit fields at bit 4 of the low half and bit 6 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr1) : "r"(zp1), "r"(0x00C00030u), "r"(0x64006400u));
    // -(1024/2^p + z): the fma addend that removes magic and zero at once (exact)
    // 0xA400AC00: -1/2^p per half
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(zc1) : "r"(zr1), "r"(0xA400AC00u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 1, 1] (result byte k <- source byte picks[k]; 0-3 = z, 4-7 = z)
    asm("prmt.b32 %0, %1, %2, 0x1111;" : "=r"(zp2) : "r"(z), "r"(z));
    // 1024 + z*2^p in each half
    // 0x000C0003: mask: the 2-bit fields at bit 0 of the low half and bit 2 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr2) : "r"(zp2), "r"(0x000C0003u), "r"(0x64006400u));
    // -(1024/2^p + z): the fma addend that removes magic and zero at once (exact)
    // 0xB400BC00: -1/2^p per half
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(zc2) : "r"(zr2), "r"(0xB400BC00u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 1, 1] (result byte k <- source byte picks[k]; 0-3 = z, 4-7 = z)
    asm("prmt.b32 %0, %1, %2, 0x1111;" : "=r"(zp3) : "r"(z), "r"(z));
    // 1024 + z*2^p in each half
    // 0x00C00030: mask: the 2-bit fields at bit 4 of the low half and bit 6 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr3) : "r"(zp3), "r"(0x00C00030u), "r"(0x64006400u));
    // -(1024/2^p + z): the fma addend that removes magic and zero at once (exact)
    // 0xA400AC00: -1/2^p per half
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(zc3) : "r"(zr3), "r"(0xA400AC00u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [2, 2, 2, 2] (result byte k <- source byte picks[k]; 0-3 = z, 4-7 = z)
    asm("prmt.b32 %0, %1, %2, 0x2222;" : "=r"(zp4) : "r"(z), "r"(z));
    // 1024 + z*2^p in each half
    // 0x000C0003: mask: the 2-bit fields at bit 0 of the low half and bit 2 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr4) : "r"(zp4), "r"(0x000C0003u), "r"(0x64006400u));
    // -(1024/2^p + z): the fma addend that removes magic and zero at once (exact)
    // 0xB400BC00: -1/2^p per half
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(zc4) : "r"(zr4), "r"(0xB400BC00u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [2, 2, 2, 2] (result byte k <- source byte picks[k]; 0-3 = z, 4-7 = z)
    asm("prmt.b32 %0, %1, %2, 0x2222;" : "=r"(zp5) : "r"(z), "r"(z));
    // 1024 + z*2^p in each half
    // 0x00C00030: mask: the 2-bit fields at bit 4 of the low half and bit 6 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr5) : "r"(zp5), "r"(0x00C00030u), "r"(0x64006400u));
    // -(1024/2^p + z): the fma addend that removes magic and zero at once (exact)
    // 0xA400AC00: -1/2^p per half
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(zc5) : "r"(zr5), "r"(0xA400AC00u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [3, 3, 3, 3] (result byte k <- source byte picks[k]; 0-3 = z, 4-7 = z)
    asm("prmt.b32 %0, %1, %2, 0x3333;" : "=r"(zp6) : "r"(z), "r"(z));
    // 1024 + z*2^p in each half
    // 0x000C0003: mask: the 2-bit fields at bit 0 of the low half and bit 2 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr6) : "r"(zp6), "r"(0x000C0003u), "r"(0x64006400u));
    // -(1024/2^p + z): the fma addend that removes magic and zero at once (exact)
    // 0xB400BC00: -1/2^p per half
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(zc6) : "r"(zr6), "r"(0xB400BC00u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [3, 3, 3, 3] (result byte k <- source byte picks[k]; 0-3 = z, 4-7 = z)
    asm("prmt.b32 %0, %1, %2, 0x3333;" : "=r"(zp7) : "r"(z), "r"(z));
    // 1024 + z*2^p in each half
    // 0x00C00030: mask: the 2-bit fields at bit 4 of the low half and bit 6 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr7) : "r"(zp7), "r"(0x00C00030u), "r"(0x64006400u));
    // -(1024/2^p + z): the fma addend that removes magic and zero at once (exact)
    // 0xA400AC00: -1/2^p per half
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(zc7) : "r"(zr7), "r"(0xA400AC00u));
    zr[0] = zc0;
    zr[1] = zc1;
    zr[2] = zc2;
    zr[3] = zc3;
    zr[4] = zc4;
    zr[5] = zc5;
    zr[6] = zc6;
    zr[7] = zc7;
}

// The conversion: one packed word -> 8 fp16x2 registers holding the exact integers (q - z).
__device__ __forceinline__ void convert(unsigned w, const unsigned* zr, unsigned* d) {
    const unsigned zc0 = zr[0];
    const unsigned zc1 = zr[1];
    const unsigned zc2 = zr[2];
    const unsigned zc3 = zr[3];
    const unsigned zc4 = zr[4];
    const unsigned zc5 = zr[5];
    const unsigned zc6 = zr[6];
    const unsigned zc7 = zr[7];
    unsigned p0, x0, d0, p1, x1, d1, p2, x2, d2, p3, x3, d3, p4, x4, d4, p5, x5, d5, p6, x6, d6, p7, x7, d7;
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 0, 0] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x0;" : "=r"(p0) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 2)
    // 0x000C0003: mask: the 2-bit fields at bit 0 of the low half and bit 2 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x0) : "r"(p0), "r"(0x000C0003u), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x34003C00: {1, 1/4}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d0) : "r"(x0), "r"(0x34003C00u), "r"(zc0));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 0, 0] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x0;" : "=r"(p1) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 4, 6)
    // 0x00C00030: mask: the 2-bit fields at bit 4 of the low half and bit 6 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x1) : "r"(p1), "r"(0x00C00030u), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x24002C00: {1/16, 1/64}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d1) : "r"(x1), "r"(0x24002C00u), "r"(zc1));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 1, 1] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x1111;" : "=r"(p2) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 2)
    // 0x000C0003: mask: the 2-bit fields at bit 0 of the low half and bit 2 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x2) : "r"(p2), "r"(0x000C0003u), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x34003C00: {1, 1/4}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d2) : "r"(x2), "r"(0x34003C00u), "r"(zc2));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 1, 1] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x1111;" : "=r"(p3) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 4, 6)
    // 0x00C00030: mask: the 2-bit fields at bit 4 of the low half and bit 6 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x3) : "r"(p3), "r"(0x00C00030u), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x24002C00: {1/16, 1/64}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d3) : "r"(x3), "r"(0x24002C00u), "r"(zc3));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [2, 2, 2, 2] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x2222;" : "=r"(p4) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 2)
    // 0x000C0003: mask: the 2-bit fields at bit 0 of the low half and bit 2 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x4) : "r"(p4), "r"(0x000C0003u), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x34003C00: {1, 1/4}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d4) : "r"(x4), "r"(0x34003C00u), "r"(zc4));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [2, 2, 2, 2] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x2222;" : "=r"(p5) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 4, 6)
    // 0x00C00030: mask: the 2-bit fields at bit 4 of the low half and bit 6 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x5) : "r"(p5), "r"(0x00C00030u), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x24002C00: {1/16, 1/64}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d5) : "r"(x5), "r"(0x24002C00u), "r"(zc5));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [3, 3, 3, 3] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x3333;" : "=r"(p6) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 2)
    // 0x000C0003: mask: the 2-bit fields at bit 0 of the low half and bit 2 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x6) : "r"(p6), "r"(0x000C0003u), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x34003C00: {1, 1/4}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d6) : "r"(x6), "r"(0x34003C00u), "r"(zc6));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [3, 3, 3, 3] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x3333;" : "=r"(p7) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 4, 6)
    // 0x00C00030: mask: the 2-bit fields at bit 4 of the low half and bit 6 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x7) : "r"(p7), "r"(0x00C00030u), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x24002C00: {1/16, 1/64}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d7) : "r"(x7), "r"(0x24002C00u), "r"(zc7));
    d[0] = d0;
    d[1] = d1;
    d[2] = d2;
    d[3] = d3;
    d[4] = d4;
    d[5] = d5;
    d[6] = d6;
    d[7] = d7;
}

// convert, then scale: out[i] = round(d[i] * s[i]); s[i] holds the scales of elements 2i, 2i+1.
__device__ __forceinline__ void dequant(unsigned w, const unsigned* zr, const unsigned* s, unsigned* out) {
    unsigned d[kPairs];
    convert(w, zr, d);
    const unsigned d0 = d[0];
    const unsigned d1 = d[1];
    const unsigned d2 = d[2];
    const unsigned d3 = d[3];
    const unsigned d4 = d[4];
    const unsigned d5 = d[5];
    const unsigned d6 = d[6];
    const unsigned d7 = d[7];
    const unsigned s0 = s[0];
    const unsigned s1 = s[1];
    const unsigned s2 = s[2];
    const unsigned s3 = s[3];
    const unsigned s4 = s[4];
    const unsigned s5 = s[5];
    const unsigned s6 = s[6];
    const unsigned s7 = s[7];
    unsigned out0, out1, out2, out3, out4, out5, out6, out7;
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out0) : "r"(d0), "r"(s0));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out1) : "r"(d1), "r"(s1));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out2) : "r"(d2), "r"(s2));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out3) : "r"(d3), "r"(s3));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out4) : "r"(d4), "r"(s4));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out5) : "r"(d5), "r"(s5));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out6) : "r"(d6), "r"(s6));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out7) : "r"(d7), "r"(s7));
    out[0] = out0;
    out[1] = out1;
    out[2] = out2;
    out[3] = out3;
    out[4] = out4;
    out[5] = out5;
    out[6] = out6;
    out[7] = out7;
}

}  // namespace gptq_uint2_asym_fp16
}  // namespace dqgen


namespace dqgen {
namespace gptq_uint2_asym_fp16 {

[[maybe_unused]] constexpr int kBlock = 256;

// n consecutive 32-bit words, as 16- or 8-byte accesses when ALIGNED (n = 4 or 2), else one by one.
template <int n, bool ALIGNED>
__device__ __forceinline__ void load_words(unsigned* dst, const unsigned* __restrict__ src) {
    if constexpr (ALIGNED && n % 4 == 0) {
#pragma unroll
        for (int i = 0; i < n; i += 4) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(src + i));
            dst[i] = v.x; dst[i + 1] = v.y; dst[i + 2] = v.z; dst[i + 3] = v.w;
        }
    } else if constexpr (ALIGNED && n == 2) {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(src));
        dst[0] = v.x; dst[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < n; ++i) dst[i] = __ldg(src + i);
    }
}

__device__ __forceinline__ void st_cs_v4(unsigned* dst, unsigned a, unsigned b, unsigned c, unsigned d) {
    asm volatile("st.global.cs.v4.u32 [%0], {" "%1, %2, %3, %4};" :: "l"(dst), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void st_cs_v2(unsigned* dst, unsigned a, unsigned b) {
    asm volatile("st.global.cs.v2.u32 [%0], {" "%1, %2};" :: "l"(dst), "r"(a), "r"(b) : "memory");
}

// STREAM: st.global.cs, the evict-first hint for data this kernel never reads again.
template <int n, bool ALIGNED, bool STREAM = false>
__device__ __forceinline__ void store_words(unsigned* __restrict__ dst, const unsigned* src) {
    if constexpr (ALIGNED && STREAM && n % 4 == 0) {
#pragma unroll
        for (int i = 0; i < n; i += 4)
            st_cs_v4(dst + i, src[i], src[i + 1], src[i + 2], src[i + 3]);
    } else if constexpr (ALIGNED && STREAM && n == 2) {
        st_cs_v2(dst, src[0], src[1]);
    } else if constexpr (ALIGNED && n % 4 == 0) {
#pragma unroll
        for (int i = 0; i < n; i += 4) *reinterpret_cast<uint4*>(dst + i) = make_uint4(src[i], src[i + 1], src[i + 2], src[i + 3]);
    } else if constexpr (ALIGNED && n == 2) {
        *reinterpret_cast<uint2*>(dst) = make_uint2(src[0], src[1]);
    } else {
#pragma unroll
        for (int i = 0; i < n; ++i) dst[i] = src[i];
    }
}

// Tile: ROWS word-rows (ROWS * 16 rows of K) x (kBlock * 8) columns; thread t owns 8 adjacent
// columns. A word holds 16 rows of one column; PRMT transposes column pairs so that each
// output row's 8 values leave in one 16-byte store, contiguous across the warp.
[[maybe_unused]] constexpr int kOrder[kPerWord] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
[[maybe_unused]] constexpr int kZeroPos[kPerWord] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};  // field of element n % 16 in a zero word
[[maybe_unused]] constexpr unsigned kFieldMask = 0x3u;

template <int VEC, int ROWS, bool ALIGNED, bool STREAM>
__device__ __forceinline__ void run(const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales,
                                    const unsigned* __restrict__ zeros, const int* __restrict__ g_idx, unsigned* __restrict__ out,
                                    long long KW, long long N, long long group_size) {
    static_assert(VEC == 8, "8 columns per thread");
    const unsigned short* scales16 = reinterpret_cast<const unsigned short*>(scales);
    unsigned short* out16 = reinterpret_cast<unsigned short*>(out);
    const long long tiles_n = (N + kBlock * VEC - 1) / (kBlock * VEC);
    const long long tiles = tiles_n * ((KW + ROWS - 1) / ROWS);
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const long long n0 = (tile % tiles_n) * (kBlock * VEC) + (long long)threadIdx.x * VEC;
        const long long i0 = (tile / tiles_n) * ROWS;
        if (n0 >= N) continue;
        const bool full = ALIGNED && n0 + VEC <= N;  // a whole 8-column group: vector accesses
        unsigned q[ROWS][VEC];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            if (full && i0 + r < KW) {
                load_words<VEC, true>(q[r], qweight + (i0 + r) * N + n0);
            } else {
#pragma unroll
                for (int j = 0; j < VEC; ++j) q[r][j] = (i0 + r < KW && n0 + j < N) ? __ldg(qweight + (i0 + r) * N + n0 + j) : 0u;
            }
        }
        [[maybe_unused]] long long g_cur = -1;
        unsigned s[VEC][kPairs];
        unsigned zr[VEC][kZeroRegs > 0 ? kZeroRegs : 1];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const long long i = i0 + r;
            if (i >= KW) break;
            const long long g = group_size > 0 ? (i * kPerWord) / group_size : 0;
            if (g != g_cur) {
                g_cur = g;
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    const long long n = n0 + j;
                    if (n >= N) continue;
                    // both halves of every pair register hold the column's scale
                    const unsigned sj = (unsigned)scales16[g * N + n] * 0x10001u;
#pragma unroll
                    for (int p = 0; p < kPairs; ++p) s[j][p] = sj;
                    // the column's stored zero, replicated into every field (0x55555555 = one bit per field)
                    const unsigned word = __ldg(zeros + g * (N / kPerWord) + n / kPerWord);
                    prepare_zeros(((word >> (kBits * kZeroPos[n % kPerWord])) & kFieldMask) * 0x55555555u, zr[j]);
                }
            }
            unsigned o[VEC][kPairs];
#pragma unroll
            for (int j = 0; j < VEC; ++j) dequant(q[r][j], zr[j], s[j], o[j]);
#pragma unroll
            for (int p = 0; p < kPairs; ++p) {
                const long long row = i * kPerWord + 2 * p;
                if (full) {
                    unsigned lo[VEC / 2], hi[VEC / 2];
#pragma unroll
                    for (int c = 0; c < VEC / 2; ++c) {
                        asm("prmt.b32 %0, %1, %2, 0x5410;" : "=r"(lo[c]) : "r"(o[2 * c][p]), "r"(o[2 * c + 1][p]));
                        asm("prmt.b32 %0, %1, %2, 0x7632;" : "=r"(hi[c]) : "r"(o[2 * c][p]), "r"(o[2 * c + 1][p]));
                    }
                    store_words<VEC / 2, true, STREAM>(out + (row * N + n0) / 2, lo);
                    store_words<VEC / 2, true, STREAM>(out + ((row + 1) * N + n0) / 2, hi);
                } else {
#pragma unroll
                    for (int j = 0; j < VEC; ++j) {
                        if (n0 + j < N) {
                            out16[row * N + n0 + j] = (unsigned short)(o[j][p] & 0xFFFFu);
                            out16[(row + 1) * N + n0 + j] = (unsigned short)(o[j][p] >> 16);
                        }
                    }
                }
            }
        }
    }
}

}  // namespace gptq_uint2_asym_fp16
}  // namespace dqgen

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_uint2_asym_fp16_v8_r1(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_uint2_asym_fp16::run<8, 1, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_uint2_asym_fp16_v8_r2(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_uint2_asym_fp16::run<8, 2, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_uint2_asym_fp16_v8_r4(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_uint2_asym_fp16::run<8, 4, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_uint2_asym_fp16_v8_r1_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_uint2_asym_fp16::run<8, 1, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_uint2_asym_fp16_v8_r2_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_uint2_asym_fp16::run<8, 2, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_uint2_asym_fp16_v8_r4_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_uint2_asym_fp16::run<8, 4, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_uint2_asym_fp16_v8_r2_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_uint2_asym_fp16::run<8, 2, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_uint2_asym_fp16_v8_r4_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_uint2_asym_fp16::run<8, 4, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

