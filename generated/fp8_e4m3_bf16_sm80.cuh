// dqgen device converter for spec "fp8_e4m3_bf16_sm80" (e4m3 -> bf16), generated from its Plan.
// Do not edit: `dqgen build specs/fp8_e4m3_bf16_sm80.yaml` regenerates it.
//
// Input word: 4 codes of 8 bits; field j holds element order[j], order = [0, 1, 2, 3].
// value = bf16( q * s ), rounded once to nearest-even.
// Plan: bit_place; 32 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_80 or newer. Outputs are bf16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace fp8_e4m3_bf16_sm80 {

[[maybe_unused]] constexpr int kBits = 8;
[[maybe_unused]] constexpr int kPerWord = 4;
[[maybe_unused]] constexpr int kPairs = 2;
[[maybe_unused]] constexpr int kZeroRegs = 0;

// The conversion: one packed word -> 2 bf16x2 registers holding the exact code values.
__device__ __forceinline__ void convert(unsigned w, unsigned* d) {
    unsigned r0, m0, c0, f0, t0, p0, q0, d0, r1, m1, c1, f1, t1, p1, q1, d1;
    // each code's byte to the top of its half: code sign on the half's sign bit
    // byte moves [0, 0, 1, 1] (0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x1100;" : "=r"(r0) : "r"(w), "r"(w));
    // the magnitude bits of each code
    // 0x7F007F00: the code's 4 exponent and 3 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m0) : "r"(r0), "r"(0x7F007F00u), "r"(0x00000000u));
    // carries into bit 15 of a half exactly for the all-ones magnitude (NaN) codes
    // 0x01000100: one unit of the last bit
    asm("add.u32 %0, %1, %2;" : "=r"(c0) : "r"(m0), "r"(0x01000100u));
    // 0xFF in the high byte of a half exactly where the carry (bit 15) is set
    // 0x00000000: zero bytes
    // byte moves [4, 9, 4, 11]: bytes 1 and 3 replicate their sign bit; 0 and 2 are zero
    asm("prmt.b32 %0, %1, %2, 0xB494;" : "=r"(f0) : "r"(c0), "r"(0x00000000u));
    // exponent and mantissa to their bf16 places: mantissa tops aligned
    // shift by 8 - 4 = 4
    asm("shr.u32 %0, %1, 4;" : "=r"(t0) : "r"(m0));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p0) : "r"(r0), "r"(t0), "r"(0x80008000u));
    // NaN / inf codes: all bf16 exponent bits set (the mantissa keeps inf vs NaN)
    // 0x78007800: the 4 bf16 exponent bits above the placed exponent
    // immLut = 0xF0 | (0xCC & 0xAA): d = a | (b & c)
    asm("lop3.b32 %0, %1, %2, %3, 0xF8;" : "=r"(q0) : "r"(p0), "r"(f0), "r"(0x78007800u));
    // exact re-bias: the placed bits read 2^-120 times the code's value (normal and subnormal alike) (mul.rn.bf16x2 needs sm_90)
    // 0x7B807B80: 2^120 = 2^(127 - 7): the bf16 and e4m3 exponent biases differ by 120
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d0) : "r"(q0), "r"(0x7B807B80u), "r"(0x80008000u));
    // each code's byte to the top of its half: code sign on the half's sign bit
    // byte moves [2, 2, 3, 3] (0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x3322;" : "=r"(r1) : "r"(w), "r"(w));
    // the magnitude bits of each code
    // 0x7F007F00: the code's 4 exponent and 3 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m1) : "r"(r1), "r"(0x7F007F00u), "r"(0x00000000u));
    // carries into bit 15 of a half exactly for the all-ones magnitude (NaN) codes
    // 0x01000100: one unit of the last bit
    asm("add.u32 %0, %1, %2;" : "=r"(c1) : "r"(m1), "r"(0x01000100u));
    // 0xFF in the high byte of a half exactly where the carry (bit 15) is set
    // 0x00000000: zero bytes
    // byte moves [4, 9, 4, 11]: bytes 1 and 3 replicate their sign bit; 0 and 2 are zero
    asm("prmt.b32 %0, %1, %2, 0xB494;" : "=r"(f1) : "r"(c1), "r"(0x00000000u));
    // exponent and mantissa to their bf16 places: mantissa tops aligned
    // shift by 8 - 4 = 4
    asm("shr.u32 %0, %1, 4;" : "=r"(t1) : "r"(m1));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p1) : "r"(r1), "r"(t1), "r"(0x80008000u));
    // NaN / inf codes: all bf16 exponent bits set (the mantissa keeps inf vs NaN)
    // 0x78007800: the 4 bf16 exponent bits above the placed exponent
    // immLut = 0xF0 | (0xCC & 0xAA): d = a | (b & c)
    asm("lop3.b32 %0, %1, %2, %3, 0xF8;" : "=r"(q1) : "r"(p1), "r"(f1), "r"(0x78007800u));
    // exact re-bias: the placed bits read 2^-120 times the code's value (normal and subnormal alike) (mul.rn.bf16x2 needs sm_90)
    // 0x7B807B80: 2^120 = 2^(127 - 7): the bf16 and e4m3 exponent biases differ by 120
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d1) : "r"(q1), "r"(0x7B807B80u), "r"(0x80008000u));
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

}  // namespace fp8_e4m3_bf16_sm80
}  // namespace dqgen
