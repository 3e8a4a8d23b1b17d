// dqgen device converter for spec "gptq_int4_asym_act_order_fp16" (u4 -> fp16), generated from its Plan.
// Do not edit: `dqgen build specs/gptq_int4_asym_act_order_fp16.yaml` regenerates it.
//
// Input word: 8 codes of 4 bits; field j holds element order[j], order = [0, 1, 2, 3, 4, 5, 6, 7].
// value = fp16( (q - z) * s ), rounded once to nearest-even.
// Plan: lanes; 12 conversion ops per 8 outputs, 12 zero-point ops per zero word.
// Proof: every code at every lane with every zero point and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: gptq_v1.
// Requires sm_53 or newer. Outputs are fp16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace gptq_int4_asym_act_order_fp16 {

[[maybe_unused]] constexpr int kBits = 4;
[[maybe_unused]] constexpr int kPerWord = 8;
[[maybe_unused]] constexpr int kPairs = 4;
[[maybe_unused]] constexpr int kZeroRegs = 4;

// Once per (group, zero word): the zero points of this word's 8 columns, prepared so
// that the conversion subtracts magic and zero point in one op.
__device__ __forceinline__ void prepare_zeros(unsigned z, unsigned* zr) {
    unsigned zp0, zr0, zc0, zp1, zr1, zc1, zp2, zr2, zc2, zp3, zr3, zc3;
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 0, 0] (result byte k <- source byte picks[k]; 0-3 = z, 4-7 = z)
    asm("prmt.b32 %0, %1, %2, 0x0;" : "=r"(zp0) : "r"(z), "r"(z));
    // 1024 + z*2^p in each half
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr0) : "r"(zp0), "r"(0x00F0000Fu), "r"(0x64006400u));
    // -(1024/2^p + stored + 1): the fma addend that removes magic and zero at once (exact)
    // 0xAC00BC00: -1/2^p per half
    // 0xBC00BC00: -1: GPTQ v1 stores z - 1
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(zc0) : "r"(zr0), "r"(0xAC00BC00u), "r"(0xBC00BC00u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 1, 1] (result byte k <- source byte picks[k]; 0-3 = z, 4-7 = z)
    asm("prmt.b32 %0, %1, %2, 0x1111;" : "=r"(zp1) : "r"(z), "r"(z));
    // 1024 + z*2^p in each half
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr1) : "r"(zp1), "r"(0x00F0000Fu), "r"(0x64006400u));
    // -(1024/2^p + stored + 1): the fma addend that removes magic and zero at once (exact)
    // 0xAC00BC00: -1/2^p per half
    // 0xBC00BC00: -1: GPTQ v1 stores z - 1
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(zc1) : "r"(zr1), "r"(0xAC00BC00u), "r"(0xBC00BC00u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [2, 2, 2, 2] (result byte k <- source byte picks[k]; 0-3 = z, 4-7 = z)
    asm("prmt.b32 %0, %1, %2, 0x2222;" : "=r"(zp2) : "r"(z), "r"(z));
    // 1024 + z*2^p in each half
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr2) : "r"(zp2), "r"(0x00F0000Fu), "r"(0x64006400u));
    // -(1024/2^p + stored + 1): the fma addend that removes magic and zero at once (exact)
    // 0xAC00BC00: -1/2^p per half
    // 0xBC00BC00: -1: GPTQ v1 stores z - 1
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(zc2) : "r"(zr2), "r"(0xAC00BC00u), "r"(0xBC00BC00u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [3, 3, 3, 3] (result byte k <- source byte picks[k]; 0-3 = z, 4-7 = z)
    asm("prmt.b32 %0, %1, %2, 0x3333;" : "=r"(zp3) : "r"(z), "r"(z));
    // 1024 + z*2^p in each half
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr3) : "r"(zp3), "r"(0x00F0000Fu), "r"(0x64006400u));
    // -(1024/2^p + stored + 1): the fma addend that removes magic and zero at once (exact)
    // 0xAC00BC00: -1/2^p per half
    // 0xBC00BC00: -1: GPTQ v1 stores z - 1
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(zc3) : "r"(zr3), "r"(0xAC00BC00u), "r"(0xBC00BC00u));
    zr[0] = zc0;
    zr[1] = zc1;
    zr[2] = zc2;
    zr[3] = zc3;
}

// The conversion: one packed word -> 4 fp16x2 registers holding the exact integers (q - z).
__device__ __forceinline__ void convert(unsigned w, const unsigned* zr, unsigned* d) {
    const unsigned zc0 = zr[0];
    const unsigned zc1 = zr[1];
    const unsigned zc2 = zr[2];
    const unsigned zc3 = zr[3];
    unsigned p0, x0, d0, p1, x1, d1, p2, x2, d2, p3, x3, d3;
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 0, 0] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x0;" : "=r"(p0) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 4)
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x0) : "r"(p0), "r"(0x00F0000Fu), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x2C003C00: {1, 1/16}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d0) : "r"(x0), "r"(0x2C003C00u), "r"(zc0));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 1, 1] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x1111;" : "=r"(p1) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 4)
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x1) : "r"(p1), "r"(0x00F0000Fu), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x2C003C00: {1, 1/16}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d1) : "r"(x1), "r"(0x2C003C00u), "r"(zc1));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [2, 2, 2, 2] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x2222;" : "=r"(p2) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 4)
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x2) : "r"(p2), "r"(0x00F0000Fu), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x2C003C00: {1, 1/16}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d2) : "r"(x2), "r"(0x2C003C00u), "r"(zc2));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [3, 3, 3, 3] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x3333;" : "=r"(p3) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 4)
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x3) : "r"(p3), "r"(0x00F0000Fu), "r"(0x64006400u));
    // (1024 + q*2^p)/2^p - (1024/2^p + z) = q - z, exact
    // 0x2C003C00: {1, 1/16}: undo the field's position 2^p in each half
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d3) : "r"(x3), "r"(0x2C003C00u), "r"(zc3));
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

}  // namespace gptq_int4_asym_act_order_fp16
}  // namespace dqgen
