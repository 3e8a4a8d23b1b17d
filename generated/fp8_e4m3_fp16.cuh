// dqgen device converter for spec "fp8_e4m3_fp16" (e4m3 -> fp16), generated from its Plan.
// Do not edit: `dqgen build specs/fp8_e4m3_fp16.yaml` regenerates it.
//
// Input word: 4 codes of 8 bits; field j holds element order[j], order = [0, 1, 2, 3].
// value = fp16( q * s ), rounded once to nearest-even.
// Plan: cvt; 4 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_89 or newer. Outputs are fp16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace fp8_e4m3_fp16 {

[[maybe_unused]] constexpr int kBits = 8;
[[maybe_unused]] constexpr int kPerWord = 4;
[[maybe_unused]] constexpr int kPairs = 2;
[[maybe_unused]] constexpr int kZeroRegs = 0;

// The conversion: one packed word -> 2 fp16x2 registers holding the exact code values.
__device__ __forceinline__ void convert(unsigned w, unsigned* d) {
    unsigned h0, h1;
    // hardware e4m3 -> fp16 conversion of two codes (exact: fp16 holds every e4m3 value)
    // the low 16 bits
    asm("{ .reg .b16 lo_, hi_; mov.b32 {lo_, hi_}, %1; cvt.rn.f16x2.e4m3x2 %0, lo_; }" : "=r"(h0) : "r"(w));
    // hardware e4m3 -> fp16 conversion of two codes (exact: fp16 holds every e4m3 value)
    // the high 16 bits
    asm("{ .reg .b16 lo_, hi_; mov.b32 {lo_, hi_}, %1; cvt.rn.f16x2.e4m3x2 %0, hi_; }" : "=r"(h1) : "r"(w));
    d[0] = h0;
    d[1] = h1;
}

// convert, then scale: out[i] = round(d[i] * s[i]); s[i] holds the scales of elements 2i, 2i+1.
__device__ __forceinline__ void dequant(unsigned w, const unsigned* s, unsigned* out) {
    unsigned d[kPairs];
    convert(w, d);
    const unsigned h0 = d[0];
    const unsigned h1 = d[1];
    const unsigned s0 = s[0];
    const unsigned s1 = s[1];
    unsigned out0, out1;
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out0) : "r"(h0), "r"(s0));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out1) : "r"(h1), "r"(s1));
    out[0] = out0;
    out[1] = out1;
}

}  // namespace fp8_e4m3_fp16
}  // namespace dqgen
