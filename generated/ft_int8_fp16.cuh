// dqgen device converter for spec "ft_int8_fp16" (u8b128 -> fp16), generated from its Plan.
// Do not edit: `dqgen build specs/ft_int8_fp16.yaml` regenerates it.
//
// Input word: 4 codes of 8 bits; field j holds element order[j], order = [0, 2, 1, 3].
// value = fp16( q * s ), rounded once to nearest-even.
// Plan: lanes; 8 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_53 or newer. Outputs are fp16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace ft_int8_fp16 {

[[maybe_unused]] constexpr int kBits = 8;
[[maybe_unused]] constexpr int kPerWord = 4;
[[maybe_unused]] constexpr int kPairs = 2;
[[maybe_unused]] constexpr int kZeroRegs = 0;

// The conversion: one packed word -> 2 fp16x2 registers holding the exact integers q.
__device__ __forceinline__ void convert(unsigned w, unsigned* d) {
    unsigned x0, d0, x1, d1;
    // 1024 + code in each half: the byte lands in the mantissa under the magic exponent byte
    // 0x64646464: magic exponent byte 0x64 (the high byte of fp16 1024.0) in every byte
    // byte moves [0, 5, 2, 5]: result byte k <- picks[k] (0-3 = w, 4-7 = magic)
    asm("prmt.b32 %0, %1, %2, 0x5250;" : "=r"(x0) : "r"(w), "r"(0x64646464u));
    // (1024 + field) - 1152 = code value, exact
    // 0x64806480: 1024 (magic) + 128 (offset) in both halves
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d0) : "r"(x0), "r"(0x64806480u));
    // 1024 + code in each half: the byte lands in the mantissa under the magic exponent byte
    // 0x64646464: magic exponent byte 0x64 (the high byte of fp16 1024.0) in every byte
    // byte moves [1, 5, 3, 5]: result byte k <- picks[k] (0-3 = w, 4-7 = magic)
    asm("prmt.b32 %0, %1, %2, 0x5351;" : "=r"(x1) : "r"(w), "r"(0x64646464u));
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

}  // namespace ft_int8_fp16
}  // namespace dqgen
