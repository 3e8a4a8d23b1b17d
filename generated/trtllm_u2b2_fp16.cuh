// dqgen device converter for spec "trtllm_u2b2_fp16" (u2b2 -> fp16), generated from its Plan.
// Do not edit: `dqgen build specs/trtllm_u2b2_fp16.yaml` regenerates it.
//
// Input word: 16 codes of 2 bits; field j holds element order[j], order = [0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15].
// value = fp16( q * s ), rounded once to nearest-even.
// Plan: lanes; 17/2 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_53 or newer. Outputs are fp16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace trtllm_u2b2_fp16 {

[[maybe_unused]] constexpr int kBits = 2;
[[maybe_unused]] constexpr int kPerWord = 16;
[[maybe_unused]] constexpr int kPairs = 8;
[[maybe_unused]] constexpr int kZeroRegs = 0;

// The conversion: one packed word -> 8 fp16x2 registers holding the exact integers q.
__device__ __forceinline__ void convert(unsigned w, unsigned* d) {
    unsigned w_s8, x0, d0, x1, d1, x2, d2, x3, d3, x4, d4, x5, d5, x6, d6, x7, d7;
    // bring fields 8 bits down, to where a mask can reach them
    // shift by 8
    asm("shr.u32 %0, %1, 8;" : "=r"(w_s8) : "r"(w));
    // 1024 + field*2^p in each half (p = 0, 0)
    // 0x00030003: mask: the 2-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x0) : "r"(w), "r"(0x00030003u), "r"(0x64006400u));
    // (1024 + field) - 1026 = code value, exact
    // 0x64026402: 1024 (magic) + 2 (offset) in both halves
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d0) : "r"(x0), "r"(0x64026402u));
    // 1024 + field*2^p in each half (p = 2, 2)
    // 0x000C000C: mask: the 2-bit fields at bit 2 of the low half and bit 2 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x1) : "r"(w), "r"(0x000C000Cu), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 2) = code value, exact
    // 0x34003400: {1/4, 1/4}: undo the field's position 2^p in each half
    // 0xDC08DC08: -(1024/2^p + 2) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d1) : "r"(x1), "r"(0x34003400u), "r"(0xDC08DC08u));
    // 1024 + field*2^p in each half (p = 4, 4)
    // 0x00300030: mask: the 2-bit fields at bit 4 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x2) : "r"(w), "r"(0x00300030u), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 2) = code value, exact
    // 0x2C002C00: {1/16, 1/16}: undo the field's position 2^p in each half
    // 0xD420D420: -(1024/2^p + 2) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d2) : "r"(x2), "r"(0x2C002C00u), "r"(0xD420D420u));
    // 1024 + field*2^p in each half (p = 6, 6)
    // 0x00C000C0: mask: the 2-bit fields at bit 6 of the low half and bit 6 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x3) : "r"(w), "r"(0x00C000C0u), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 2) = code value, exact
    // 0x24002400: {1/64, 1/64}: undo the field's position 2^p in each half
    // 0xCC80CC80: -(1024/2^p + 2) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d3) : "r"(x3), "r"(0x24002400u), "r"(0xCC80CC80u));
    // 1024 + field*2^p in each half (p = 0, 0)
    // 0x00030003: mask: the 2-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x4) : "r"(w_s8), "r"(0x00030003u), "r"(0x64006400u));
    // (1024 + field) - 1026 = code value, exact
    // 0x64026402: 1024 (magic) + 2 (offset) in both halves
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d4) : "r"(x4), "r"(0x64026402u));
    // 1024 + field*2^p in each half (p = 2, 2)
    // 0x000C000C: mask: the 2-bit fields at bit 2 of the low half and bit 2 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x5) : "r"(w_s8), "r"(0x000C000Cu), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 2) = code value, exact
    // 0x34003400: {1/4, 1/4}: undo the field's position 2^p in each half
    // 0xDC08DC08: -(1024/2^p + 2) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d5) : "r"(x5), "r"(0x34003400u), "r"(0xDC08DC08u));
    // 1024 + field*2^p in each half (p = 4, 4)
    // 0x00300030: mask: the 2-bit fields at bit 4 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x6) : "r"(w_s8), "r"(0x00300030u), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 2) = code value, exact
    // 0x2C002C00: {1/16, 1/16}: undo the field's position 2^p in each half
    // 0xD420D420: -(1024/2^p + 2) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d6) : "r"(x6), "r"(0x2C002C00u), "r"(0xD420D420u));
    // 1024 + field*2^p in each half (p = 6, 6)
    // 0x00C000C0: mask: the 2-bit fields at bit 6 of the low half and bit 6 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x7) : "r"(w_s8), "r"(0x00C000C0u), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 2) = code value, exact
    // 0x24002400: {1/64, 1/64}: undo the field's position 2^p in each half
    // 0xCC80CC80: -(1024/2^p + 2) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d7) : "r"(x7), "r"(0x24002400u), "r"(0xCC80CC80u));
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
__device__ __forceinline__ void dequant(unsigned w, const unsigned* s, unsigned* out) {
    unsigned d[kPairs];
    convert(w, d);
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

}  // namespace trtllm_u2b2_fp16
}  // namespace dqgen
