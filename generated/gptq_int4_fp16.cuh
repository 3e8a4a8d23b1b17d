// dqgen device converter for spec "gptq_int4_fp16" (u4b8 -> fp16), generated from its Plan.
// Do not edit: `dqgen build specs/gptq_int4_fp16.yaml` regenerates it.
//
// Input word: 8 codes of 4 bits; field j holds element order[j], order = [0, 1, 2, 3, 4, 5, 6, 7].
// value = fp16( q * s ), rounded once to nearest-even.
// Plan: lanes; 12 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_53 or newer. Outputs are fp16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace gptq_int4_fp16 {

[[maybe_unused]] constexpr int kBits = 4;
[[maybe_unused]] constexpr int kPerWord = 8;
[[maybe_unused]] constexpr int kPairs = 4;
[[maybe_unused]] constexpr int kZeroRegs = 0;

// The conversion: one packed word -> 4 fp16x2 registers holding the exact integers q.
__device__ __forceinline__ void convert(unsigned w, unsigned* d) {
    unsigned p0, x0, d0, p1, x1, d1, p2, x2, d2, p3, x3, d3;
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 0, 0] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x0;" : "=r"(p0) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 4)
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x0) : "r"(p0), "r"(0x00F0000Fu), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 8) = code value, exact
    // 0x2C003C00: {1, 1/16}: undo the field's position 2^p in each half
    // 0xD480E408: -(1024/2^p + 8) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d0) : "r"(x0), "r"(0x2C003C00u), "r"(0xD480E408u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 1, 1] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x1111;" : "=r"(p1) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 4)
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x1) : "r"(p1), "r"(0x00F0000Fu), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 8) = code value, exact
    // 0x2C003C00: {1, 1/16}: undo the field's position 2^p in each half
    // 0xD480E408: -(1024/2^p + 8) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d1) : "r"(x1), "r"(0x2C003C00u), "r"(0xD480E408u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [2, 2, 2, 2] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x2222;" : "=r"(p2) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 4)
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x2) : "r"(p2), "r"(0x00F0000Fu), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 8) = code value, exact
    // 0x2C003C00: {1, 1/16}: undo the field's position 2^p in each half
    // 0xD480E408: -(1024/2^p + 8) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d2) : "r"(x2), "r"(0x2C003C00u), "r"(0xD480E408u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [3, 3, 3, 3] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x3333;" : "=r"(p3) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 4)
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x3) : "r"(p3), "r"(0x00F0000Fu), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 8) = code value, exact
    // 0x2C003C00: {1, 1/16}: undo the field's position 2^p in each half
    // 0xD480E408: -(1024/2^p + 8) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d3) : "r"(x3), "r"(0x2C003C00u), "r"(0xD480E408u));
    d[0] = d0;
    d[1] = d1;
    d[2] = d2;
    d[3] = d3;
}

// convert, then scale: out[i] = round(d[i] * s[i]); s[i] holds the scales of elements 2i, 2i+1.
__device__ __forceinline__ void dequant(unsigned w, const unsigned* s, unsigned* out) {
    unsigned d[kPairs];
    convert(w, d);
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

}  // namespace gptq_int4_fp16
}  // namespace dqgen
