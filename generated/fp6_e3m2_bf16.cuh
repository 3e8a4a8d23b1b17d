// dqgen device converter for spec "fp6_e3m2_bf16" (e3m2 -> bf16), generated from its Plan.
// Do not edit: `dqgen build specs/fp6_e3m2_bf16.yaml` regenerates it.
//
// Input block: 3 words (w0, w1, w2, low first) holding 16 codes of 6 bits; code i is bits
// [6i, 6i + 6) of the 96-bit little-endian run (codes that straddle two words included).
// value = bf16( q * s ), rounded once to nearest-even.
// Plan: bit_place; 23 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_80 or newer. Outputs are bf16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace fp6_e3m2_bf16 {

[[maybe_unused]] constexpr int kBits = 6;
[[maybe_unused]] constexpr int kPerWord = 16;
[[maybe_unused]] constexpr int kPairs = 8;
[[maybe_unused]] constexpr int kZeroRegs = 0;
[[maybe_unused]] constexpr int kWords = 3;  // 32-bit words per packing block

// The conversion: one 3-word block -> 8 bf16x2 registers holding the exact code values.
__device__ __forceinline__ void convert(unsigned w0, unsigned w1, unsigned w2, unsigned* d) {
    unsigned v30m, v4, r0, m0, t0, p0, d0, v10, r1, m1, t1, p1, d1, r2, m2, t2, p2, d2, r3, m3, t3, p3, d3, v46, v52, r4, m4, t4, p4, d4, v58, r5, m5, t5, p5, d5, r6, m6, t6, p6, d6, r7, m7, t7, p7, d7;
    // block bits -2..29: word 0 moved up, zeros below the block
    // shift by 2
    asm("shl.b32 %0, %1, 2;" : "=r"(v30m) : "r"(w0));
    // block bits 4..35, across words 0 and 1
    // funnel shift of (w1:w0) by 4
    asm("shf.r.clamp.b32 %0, %1, %2, 4;" : "=r"(v4) : "r"(w0), "r"(w1));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [0, 0, 4, 4] (0-3 = v30m, 4-7 = v4): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x4400;" : "=r"(r0) : "r"(v30m), "r"(v4));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 3 exponent and 2 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m0) : "r"(r0), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their bf16 places: mantissa tops aligned
    // shift by 8 - 3 = 5
    asm("shr.u32 %0, %1, 5;" : "=r"(t0) : "r"(m0));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p0) : "r"(r0), "r"(t0), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-124 times the code's value (normal and subnormal alike) (mul.rn.bf16x2 needs sm_90)
    // 0x7D807D80: 2^124 = 2^(127 - 3): the bf16 and e3m2 exponent biases differ by 124
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d0) : "r"(p0), "r"(0x7D807D80u), "r"(0x80008000u));
    // block bits 10..41, across words 0 and 1
    // funnel shift of (w1:w0) by 10
    asm("shf.r.clamp.b32 %0, %1, %2, 10;" : "=r"(v10) : "r"(w0), "r"(w1));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [0, 0, 6, 6] (0-3 = v10, 4-7 = w0): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x6600;" : "=r"(r1) : "r"(v10), "r"(w0));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 3 exponent and 2 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m1) : "r"(r1), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their bf16 places: mantissa tops aligned
    // shift by 8 - 3 = 5
    asm("shr.u32 %0, %1, 5;" : "=r"(t1) : "r"(m1));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p1) : "r"(r1), "r"(t1), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-124 times the code's value (normal and subnormal alike) (mul.rn.bf16x2 needs sm_90)
    // 0x7D807D80: 2^124 = 2^(127 - 3): the bf16 and e3m2 exponent biases differ by 124
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d1) : "r"(p1), "r"(0x7D807D80u), "r"(0x80008000u));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [3, 3, 7, 7] (0-3 = v30m, 4-7 = v4): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x7733;" : "=r"(r2) : "r"(v30m), "r"(v4));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 3 exponent and 2 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m2) : "r"(r2), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their bf16 places: mantissa tops aligned
    // shift by 8 - 3 = 5
    asm("shr.u32 %0, %1, 5;" : "=r"(t2) : "r"(m2));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p2) : "r"(r2), "r"(t2), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-124 times the code's value (normal and subnormal alike) (mul.rn.bf16x2 needs sm_90)
    // 0x7D807D80: 2^124 = 2^(127 - 3): the bf16 and e3m2 exponent biases differ by 124
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d2) : "r"(p2), "r"(0x7D807D80u), "r"(0x80008000u));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [3, 3, 5, 5] (0-3 = v10, 4-7 = w1): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x5533;" : "=r"(r3) : "r"(v10), "r"(w1));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 3 exponent and 2 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m3) : "r"(r3), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their bf16 places: mantissa tops aligned
    // shift by 8 - 3 = 5
    asm("shr.u32 %0, %1, 5;" : "=r"(t3) : "r"(m3));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p3) : "r"(r3), "r"(t3), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-124 times the code's value (normal and subnormal alike) (mul.rn.bf16x2 needs sm_90)
    // 0x7D807D80: 2^124 = 2^(127 - 3): the bf16 and e3m2 exponent biases differ by 124
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d3) : "r"(p3), "r"(0x7D807D80u), "r"(0x80008000u));
    // block bits 46..77, across words 1 and 2
    // funnel shift of (w2:w1) by 14
    asm("shf.r.clamp.b32 %0, %1, %2, 14;" : "=r"(v46) : "r"(w1), "r"(w2));
    // block bits 52..83, across words 1 and 2
    // funnel shift of (w2:w1) by 20
    asm("shf.r.clamp.b32 %0, %1, %2, 20;" : "=r"(v52) : "r"(w1), "r"(w2));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [0, 0, 4, 4] (0-3 = v46, 4-7 = v52): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x4400;" : "=r"(r4) : "r"(v46), "r"(v52));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 3 exponent and 2 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m4) : "r"(r4), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their bf16 places: mantissa tops aligned
    // shift by 8 - 3 = 5
    asm("shr.u32 %0, %1, 5;" : "=r"(t4) : "r"(m4));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p4) : "r"(r4), "r"(t4), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-124 times the code's value (normal and subnormal alike) (mul.rn.bf16x2 needs sm_90)
    // 0x7D807D80: 2^124 = 2^(127 - 3): the bf16 and e3m2 exponent biases differ by 124
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d4) : "r"(p4), "r"(0x7D807D80u), "r"(0x80008000u));
    // block bits 58..89, across words 1 and 2
    // funnel shift of (w2:w1) by 26
    asm("shf.r.clamp.b32 %0, %1, %2, 26;" : "=r"(v58) : "r"(w1), "r"(w2));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [0, 0, 4, 4] (0-3 = v58, 4-7 = w2): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x4400;" : "=r"(r5) : "r"(v58), "r"(w2));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 3 exponent and 2 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m5) : "r"(r5), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their bf16 places: mantissa tops aligned
    // shift by 8 - 3 = 5
    asm("shr.u32 %0, %1, 5;" : "=r"(t5) : "r"(m5));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p5) : "r"(r5), "r"(t5), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-124 times the code's value (normal and subnormal alike) (mul.rn.bf16x2 needs sm_90)
    // 0x7D807D80: 2^124 = 2^(127 - 3): the bf16 and e3m2 exponent biases differ by 124
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d5) : "r"(p5), "r"(0x7D807D80u), "r"(0x80008000u));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [3, 3, 7, 7] (0-3 = v46, 4-7 = v52): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x7733;" : "=r"(r6) : "r"(v46), "r"(v52));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 3 exponent and 2 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m6) : "r"(r6), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their bf16 places: mantissa tops aligned
    // shift by 8 - 3 = 5
    asm("shr.u32 %0, %1, 5;" : "=r"(t6) : "r"(m6));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p6) : "r"(r6), "r"(t6), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-124 times the code's value (normal and subnormal alike) (mul.rn.bf16x2 needs sm_90)
    // 0x7D807D80: 2^124 = 2^(127 - 3): the bf16 and e3m2 exponent biases differ by 124
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d6) : "r"(p6), "r"(0x7D807D80u), "r"(0x80008000u));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [3, 3, 7, 7] (0-3 = v58, 4-7 = w2): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x7733;" : "=r"(r7) : "r"(v58), "r"(w2));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 3 exponent and 2 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m7) : "r"(r7), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their bf16 places: mantissa tops aligned
    // shift by 8 - 3 = 5
    asm("shr.u32 %0, %1, 5;" : "=r"(t7) : "r"(m7));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p7) : "r"(r7), "r"(t7), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-124 times the code's value (normal and subnormal alike) (mul.rn.bf16x2 needs sm_90)
    // 0x7D807D80: 2^124 = 2^(127 - 3): the bf16 and e3m2 exponent biases differ by 124
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d7) : "r"(p7), "r"(0x7D807D80u), "r"(0x80008000u));
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
__device__ __forceinline__ void dequant(unsigned w0, unsigned w1, unsigned w2, const unsigned* s, unsigned* out) {
    unsigned d[kPairs];
    convert(w0, w1, w2, d);
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
    // (code - zero) * scale, rounded once to nearest-even bf16 (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out0) : "r"(d0), "r"(s0), "r"(0x80008000u));
    // (code - zero) * scale, rounded once to nearest-even bf16 (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out1) : "r"(d1), "r"(s1), "r"(0x80008000u));
    // (code - zero) * scale, rounded once to nearest-even bf16 (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out2) : "r"(d2), "r"(s2), "r"(0x80008000u));
    // (code - zero) * scale, rounded once to nearest-even bf16 (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out3) : "r"(d3), "r"(s3), "r"(0x80008000u));
    // (code - zero) * scale, rounded once to nearest-even bf16 (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out4) : "r"(d4), "r"(s4), "r"(0x80008000u));
    // (code - zero) * scale, rounded once to nearest-even bf16 (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out5) : "r"(d5), "r"(s5), "r"(0x80008000u));
    // (code - zero) * scale, rounded once to nearest-even bf16 (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out6) : "r"(d6), "r"(s6), "r"(0x80008000u));
    // (code - zero) * scale, rounded once to nearest-even bf16 (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out7) : "r"(d7), "r"(s7), "r"(0x80008000u));
    out[0] = out0;
    out[1] = out1;
    out[2] = out2;
    out[3] = out3;
    out[4] = out4;
    out[5] = out5;
    out[6] = out6;
    out[7] = out7;
}

}  // namespace fp6_e3m2_bf16
}  // namespace dqgen
