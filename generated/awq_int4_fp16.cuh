// dqgen device converter for spec "awq_int4_fp16" (u4 -> fp16), generated from its Plan.
// Do not edit: `dqgen build specs/awq_int4_fp16.yaml` regenerates it.
//
// Input word: 8 codes of 4 bits; field j holds element order[j], order = [0, 2, 4, 6, 1, 3, 5, 7].
// value = fp16( (q - z) * s ), rounded once to nearest-even.
// Plan: lanes; 9 conversion ops per 8 outputs, 7 zero-point ops per zero word.
// Proof: every code at every lane with every zero point and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: integer.
// Requires sm_53 or newer. Outputs are fp16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace awq_int4_fp16 {

[[maybe_unused]] constexpr int kBits = 4;
[[maybe_unused]] constexpr int kPerWord = 8;
[[maybe_unused]] constexpr int kPairs = 4;
[[maybe_unused]] constexpr int kZeroRegs = 4;

// Once per (group, zero word): the zero points of this word's 8 columns, prepared so
// that the conversion subtracts magic and zero point in one op.
__device__ __forceinline__ void prepare_zeros(unsigned z, unsigned* zr) {
    unsigned z_s8, zr0, zr1, zc1, zr2, zr3, zc3;
    // bring fields 8 bits down, to where a mask can reach them
    // shift by 8
    asm("shr.u32 %0, %1, 8;" : "=r"(z_s8) : "r"(z));
    // 1024 + z*2^p in each half
    // 0x000F000F: mask: the 4-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr0) : "r"(z), "r"(0x000F000Fu), "r"(0x64006400u));
    // 1024 + z*2^p in each half
    // 0x00F000F0: mask: the 4-bit fields at bit 4 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr1) : "r"(z), "r"(0x00F000F0u), "r"(0x64006400u));
    // -(1024/2^p + z): the fma addend that removes magic and zero at once (exact)
    // 0xAC00AC00: -1/2^p per half
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(zc1) : "r"(zr1), "r"(0xAC00AC00u));
    // 1024 + z*2^p in each half
    // 0x000F000F: mask: the 4-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr2) : "r"(z_s8), "r"(0x000F000Fu), "r"(0x64006400u));
    // 1024 + z*2^p in each half
    // 0x00F000F0: mask: the 4-bit fields at bit 4 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr3) : "r"(z_s8), "r"(0x00F000F0u), "r"(0x64006400u));
    // -(1024/2^p + z): the fma addend that removes magic and zero at once (exact)
    // 0xAC00AC00: -1/2^p per half
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(zc3) : "r"(zr3), "r"(0xAC00AC00u));
    zr[0] = zr0;
    zr[1] = zc1;
    zr[2] = zr2;
    zr[3] = zc3;
}

// The conversion: one packed word -> 4 fp16x2 registers holding the exact integers (q - z).
__device__ __forceinline__ void convert(unsigned w, const unsigned* zr, unsigned* d) {
    const unsigned zr0 = zr[0];
    const unsigned zc1 = zr[1];
    const unsigned zr2 = zr[2];
    const unsigned zc3 = zr[3];
    unsigned w_s8, x0, d0, x1, d1, x2, d2, x3, d3;
    // bring fields 8 bits down, to where a mask can reach them
    // shift by 8
    asm("shr.u32 %0, %1, 8;" : "=r"(w_s8) : "r"(w));
    // 1024 + field*2^p in each half (p = 0, 0)
    // 0x000F000F: mask: the 4-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x0) : "r"(w), "r"(0x000F000Fu), "r"(0x64006400u));
    // (1024 + q) - (1024 + z) = q - z, exact (the zero point is folded into the magic subtraction)
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d0) : "r"(x0), "r"(zr0));
    // 1024 + field*2^p in each half (p = 4, 4)
    // 0x00F000F0: mask: the 4-bit fields at bit 4 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x1) : "r"(w), "r"(0x00F000F0u), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x2C002C00: {1/16, 1/16}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d1) : "r"(x1), "r"(0x2C002C00u), "r"(zc1));
    // 1024 + field*2^p in each half (p = 0, 0)
    // 0x000F000F: mask: the 4-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x2) : "r"(w_s8), "r"(0x000F000Fu), "r"(0x64006400u));
    // (1024 + q) - (1024 + z) = q - z, exact (the zero point is folded into the magic subtraction)
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d2) : "r"(x2), "r"(zr2));
    // 1024 + field*2^p in each half (p = 4, 4)
    // 0x00F000F0: mask: the 4-bit fields at bit 4 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x3) : "r"(w_s8), "r"(0x00F000F0u), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x2C002C00: {1/16, 1/16}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d3) : "r"(x3), "r"(0x2C002C00u), "r"(zc3));
    d[0] = d0;
    d[1] = d1;
    d[2] = d2;
    d[3] = d3;
}

// convert, then scale: out[i] = round(d[i] * s[i]); s[i] holds the scales of elements 2i, 2i+1.
__device__ __forceinline__ void dequant(unsigned w, const unsigned* zr, const unsigned* s, unsigned* out) {
    unsigned d[kPairs];
    convert(w, zr, d);
    const unsigned d0 = d[0];
    const unsigned d1 = d[1];
    const unsigned d2 = d[2];
    const unsigned d3 = d[3];
    const unsigned s0 = s[0];
    const unsigned s1 = s[1];
    const unsigned s2 = s[2];
    const unsigned s3 = s[3];
    unsigned out0, out1, out2, out3;
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out0) : "r"(d0), "r"(s0));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out1) : "r"(d1), "r"(s1));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out2) : "r"(d2), "r"(s2));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out3) : "r"(d3), "r"(s3));
    out[0] = out0;
    out[1] = out1;
    out[2] = out2;
    out[3] = out3;
}

}  // namespace awq_int4_fp16
}  // namespace dqgen
