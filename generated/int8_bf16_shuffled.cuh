// dqgen device converter for spec "int8_bf16_shuffled" (s8 -> bf16), generated from its Plan.
// Do not edit: `dqgen build specs/int8_bf16_shuffled.yaml` regenerates it.
//
// Input word: 4 codes of 8 bits; field j holds element order[j], order = [0, 2, 1, 3].
// value = bf16( q * s ), rounded once to nearest-even.
// Plan: sign_split; 14 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_80 or newer. Outputs are bf16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace int8_bf16_shuffled {

[[maybe_unused]] constexpr int kBits = 8;
[[maybe_unused]] constexpr int kPerWord = 4;
[[maybe_unused]] constexpr int kPairs = 2;
[[maybe_unused]] constexpr int kZeroRegs = 0;

// The conversion: one packed word -> 2 bf16x2 registers holding the exact integers q.
__device__ __forceinline__ void convert(unsigned w, unsigned* d) {
    unsigned lo0, hi0, d0, p1, lo1, hi1, d1;
    // 128 + low 7 bits, exact
    // 0x007F007F: the low 7 bits of each half's field
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(lo0) : "r"(w), "r"(0x007F007Fu), "r"(0x43004300u));
    // 128 * 2^(top) = 128 + 128*(top): the bit doubles the magic through the exponent
    // 0x00800080: the top bit (bit 7) of each half's field: it lands on the exponent's lowest bit
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(hi0) : "r"(w), "r"(0x00800080u), "r"(0x43004300u));
    // (128 + low) - (128 + 128*(top)) = code value, exact
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d0) : "r"(hi0), "r"(0xBF80BF80u), "r"(lo0));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 3, 3] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x3311;" : "=r"(p1) : "r"(w), "r"(w));
    // 128 + low 7 bits, exact
    // 0x007F007F: the low 7 bits of each half's field
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(lo1) : "r"(p1), "r"(0x007F007Fu), "r"(0x43004300u));
    // 128 * 2^(top) = 128 + 128*(top): the bit doubles the magic through the exponent
    // 0x00800080: the top bit (bit 7) of each half's field: it lands on the exponent's lowest bit
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(hi1) : "r"(p1), "r"(0x00800080u), "r"(0x43004300u));
    // (128 + low) - (128 + 128*(top)) = code value, exact
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d1) : "r"(hi1), "r"(0xBF80BF80u), "r"(lo1));
    d[0] = d0;
    d[1] = d1;
}

// convert, then scale: out[i] = round(d[i] * s[i]); s[i] holds the scales of elements 2i, 2i+1.
__device__ __forceinline__ void dequant(unsigned w, const unsigned* s, unsigned* out) {
    unsigned d[kPairs];
    convert(w, d);
    const unsigned d0 = d[0];
    const unsigned d1 = d[1];
    const unsigned s0 = s[0];
    const unsigned s1 = s[1];
    unsigned out0, out1;
    // (code - zero) * scale, rounded once to nearest-even bf16 (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out0) : "r"(d0), "r"(s0), "r"(0x80008000u));
    // (code - zero) * scale, rounded once to nearest-even bf16 (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out1) : "r"(d1), "r"(s1), "r"(0x80008000u));
    out[0] = out0;
    out[1] = out1;
}

}  // namespace int8_bf16_shuffled
}  // namespace dqgen
