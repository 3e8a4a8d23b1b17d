// dqgen device converter for spec "int8_fp16" (s8 -> fp16), generated from its Plan.
// Do not edit: `dqgen build specs/int8_fp16.yaml` regenerates it.
//
// Input word: 4 codes of 8 bits; field j holds element order[j], order = [0, 1, 2, 3].
// value = fp16( q * s ), rounded once to nearest-even.
// Plan: lanes; 10 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_53 or newer. Outputs are fp16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace int8_fp16 {

[[maybe_unused]] constexpr int kBits = 8;
[[maybe_unused]] constexpr int kPerWord = 4;
[[maybe_unused]] constexpr int kPairs = 2;
[[maybe_unused]] constexpr int kZeroRegs = 0;

// The conversion: one packed word -> 2 fp16x2 registers holding the exact integers q.
__device__ __forceinline__ void convert(unsigned w, unsigned* d) {
    unsigned wx, x0, d0, x1, d1;
    // flip every field's sign bit: two's complement -> offset binary (value + 128)
    // 0x80808080: the top bit of each of the 4 8-bit fields
    // 0x80808080: the top bit of each of the 4 8-bit fields
    // immLut = 0xF0 ^ 0xCC: d = a ^ b
    asm("lop3.b32 %0, %1, %2, %3, 0x3C;" : "=r"(wx) : "r"(w), "r"(0x80808080u), "r"(0x80808080u));
    // 1024 + code in each half: the byte lands in the mantissa under the magic exponent byte
    // 0x64646464: magic exponent byte 0x64 (the high byte of fp16 1024.0) in every byte
    // byte moves [0, 5, 1, 5]: result byte k <- picks[k] (0-3 = wx, 4-7 = magic)
    asm("prmt.b32 %0, %1, %2, 0x5150;" : "=r"(x0) : "r"(wx), "r"(0x64646464u));
    // (1024 + field) - 1152 = code value, exact
    // 0x64806480: 1024 (magic) + 128 (offset) in both halves
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d0) : "r"(x0), "r"(0x64806480u));
    // 1024 + code in each half: the byte lands in the mantissa under the magic exponent byte
    // 0x64646464: magic exponent byte 0x64 (the high byte of fp16 1024.0) in every byte
    // byte moves [2, 5, 3, 5]: result byte k <- picks[k] (0-3 = wx, 4-7 = magic)
    asm("prmt.b32 %0, %1, %2, 0x5352;" : "=r"(x1) : "r"(wx), "r"(0x64646464u));
    // (1024 + field) - 1152 = code value, exact
    // 0x64806480: 1024 (magic) + 128 (offset) in both halves
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d1) : "r"(x1), "r"(0x64806480u));
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
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out0) : "r"(d0), "r"(s0));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out1) : "r"(d1), "r"(s1));
    out[0] = out0;
    out[1] = out1;
}

}  // namespace int8_fp16
}  // namespace dqgen
