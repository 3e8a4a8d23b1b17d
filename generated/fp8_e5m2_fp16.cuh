// dqgen device converter for spec "fp8_e5m2_fp16" (e5m2 -> fp16), generated from its Plan.
// Do not edit: `dqgen build specs/fp8_e5m2_fp16.yaml` regenerates it.
//
// Input word: 4 codes of 8 bits; field j holds element order[j], order = [0, 1, 2, 3].
// value = fp16( q * s ), rounded once to nearest-even.
// Plan: bit_place; 4 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_53 or newer. Outputs are fp16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace fp8_e5m2_fp16 {

[[maybe_unused]] constexpr int kBits = 8;
[[maybe_unused]] constexpr int kPerWord = 4;
[[maybe_unused]] constexpr int kPairs = 2;
[[maybe_unused]] constexpr int kZeroRegs = 0;

// The conversion: one packed word -> 2 fp16x2 registers holding the exact code values.
__device__ __forceinline__ void convert(unsigned w, unsigned* d) {
    unsigned r0, r1;
    // each code's byte to the top of its half: code sign on the half's sign bit
    // 0x00000000: zero bytes
    // byte moves [4, 0, 4, 1] (0-3 = w, 4-7 = zero)
    asm("prmt.b32 %0, %1, %2, 0x1404;" : "=r"(r0) : "r"(w), "r"(0x00000000u));
    // each code's byte to the top of its half: code sign on the half's sign bit
    // 0x00000000: zero bytes
    // byte moves [4, 2, 4, 3] (0-3 = w, 4-7 = zero)
    asm("prmt.b32 %0, %1, %2, 0x3424;" : "=r"(r1) : "r"(w), "r"(0x00000000u));
    d[0] = r0;
    d[1] = r1;
}

// convert, then scale: out[i] = round(d[i] * s[i]); s[i] holds the scales of elements 2i, 2i+1.
__device__ __forceinline__ void dequant(unsigned w, const unsigned* s, unsigned* out) {
    unsigned d[kPairs];
    convert(w, d);
    const unsigned r0 = d[0];
    const unsigned r1 = d[1];
    const unsigned s0 = s[0];
    const unsigned s1 = s[1];
    unsigned out0, out1;
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out0) : "r"(r0), "r"(s0));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out1) : "r"(r1), "r"(s1));
    out[0] = out0;
    out[1] = out1;
}

}  // namespace fp8_e5m2_fp16
}  // namespace dqgen
