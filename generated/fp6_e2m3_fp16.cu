// dqgen standalone dequantize kernel for spec "fp6_e2m3_fp16" (e2m3 -> fp16), generated.
// Do not edit: `dqgen build specs/fp6_e2m3_fp16.yaml` regenerates it.
//   qweight [3K/16, N] int32 (packed along K in 3-word blocks of 16 codes: block b = rows 16b..16b+15
//   in words qweight[3b..3b+2, n]), scales [G, N] fp16,
//   out [K, N] fp16 row-major; G = K / group_size (1 when group_size == -1).
// Index arithmetic is 64-bit throughout; any shape the packing allows is handled (tails are guarded).
// Entry points dqgen_fp6_e2m3_fp16_v<VEC>_r<ROWS>[_u]: each thread converts ROWS rows x VEC words, all of
// its loads issued before any conversion (memory-level parallelism), one scale/zero-point preparation
// per group; "_u" variants make only 4-byte accesses, for base pointers that are not 16-byte aligned.

// dqgen device converter for spec "fp6_e2m3_fp16" (e2m3 -> fp16), generated from its Plan.
// Do not edit: `dqgen build specs/fp6_e2m3_fp16.yaml` regenerates it.
//
// Input block: 3 words (w0, w1, w2, low first) holding 16 codes of 6 bits; code i is bits
// [6i, 6i + 6) of the 96-bit little-endian run (codes that straddle two words included).
// value = fp16( q * s ), rounded once to nearest-even.
// Plan: bit_place; 23 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_53 or newer. Outputs are fp16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace fp6_e2m3_fp16 {

[[maybe_unused]] constexpr int kBits = 6;
[[maybe_unused]] constexpr int kPerWord = 16;
[[maybe_unused]] constexpr int kPairs = 8;
[[maybe_unused]] constexpr int kZeroRegs = 0;
[[maybe_unused]] constexpr int kWords = 3;  // 32-bit words per packing block

// The conversion: one 3-word block -> 8 fp16x2 registers holding the exact code values.
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
    // 0x7C007C00: the code's 2 exponent and 3 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m0) : "r"(r0), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their fp16 places: mantissa tops aligned
    // shift by 5 - 2 = 3
    asm("shr.u32 %0, %1, 3;" : "=r"(t0) : "r"(m0));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p0) : "r"(r0), "r"(t0), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-14 times the code's value (normal and subnormal alike)
    // 0x74007400: 2^14 = 2^(15 - 1): the fp16 and e2m3 exponent biases differ by 14
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d0) : "r"(p0), "r"(0x74007400u));
    // block bits 10..41, across words 0 and 1
    // funnel shift of (w1:w0) by 10
    asm("shf.r.clamp.b32 %0, %1, %2, 10;" : "=r"(v10) : "r"(w0), "r"(w1));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [0, 0, 6, 6] (0-3 = v10, 4-7 = w0): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x6600;" : "=r"(r1) : "r"(v10), "r"(w0));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 2 exponent and 3 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m1) : "r"(r1), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their fp16 places: mantissa tops aligned
    // shift by 5 - 2 = 3
    asm("shr.u32 %0, %1, 3;" : "=r"(t1) : "r"(m1));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p1) : "r"(r1), "r"(t1), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-14 times the code's value (normal and subnormal alike)
    // 0x74007400: 2^14 = 2^(15 - 1): the fp16 and e2m3 exponent biases differ by 14
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d1) : "r"(p1), "r"(0x74007400u));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [3, 3, 7, 7] (0-3 = v30m, 4-7 = v4): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x7733;" : "=r"(r2) : "r"(v30m), "r"(v4));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 2 exponent and 3 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m2) : "r"(r2), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their fp16 places: mantissa tops aligned
    // shift by 5 - 2 = 3
    asm("shr.u32 %0, %1, 3;" : "=r"(t2) : "r"(m2));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p2) : "r"(r2), "r"(t2), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-14 times the code's value (normal and subnormal alike)
    // 0x74007400: 2^14 = 2^(15 - 1): the fp16 and e2m3 exponent biases differ by 14
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d2) : "r"(p2), "r"(0x74007400u));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [3, 3, 5, 5] (0-3 = v10, 4-7 = w1): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x5533;" : "=r"(r3) : "r"(v10), "r"(w1));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 2 exponent and 3 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m3) : "r"(r3), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their fp16 places: mantissa tops aligned
    // shift by 5 - 2 = 3
    asm("shr.u32 %0, %1, 3;" : "=r"(t3) : "r"(m3));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p3) : "r"(r3), "r"(t3), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-14 times the code's value (normal and subnormal alike)
    // 0x74007400: 2^14 = 2^(15 - 1): the fp16 and e2m3 exponent biases differ by 14
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d3) : "r"(p3), "r"(0x74007400u));
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
    // 0x7C007C00: the code's 2 exponent and 3 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m4) : "r"(r4), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their fp16 places: mantissa tops aligned
    // shift by 5 - 2 = 3
    asm("shr.u32 %0, %1, 3;" : "=r"(t4) : "r"(m4));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p4) : "r"(r4), "r"(t4), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-14 times the code's value (normal and subnormal alike)
    // 0x74007400: 2^14 = 2^(15 - 1): the fp16 and e2m3 exponent biases differ by 14
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d4) : "r"(p4), "r"(0x74007400u));
    // block bits 58..89, across words 1 and 2
    // funnel shift of (w2:w1) by 26
    asm("shf.r.clamp.b32 %0, %1, %2, 26;" : "=r"(v58) : "r"(w1), "r"(w2));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [0, 0, 4, 4] (0-3 = v58, 4-7 = w2): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x4400;" : "=r"(r5) : "r"(v58), "r"(w2));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 2 exponent and 3 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m5) : "r"(r5), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their fp16 places: mantissa tops aligned
    // shift by 5 - 2 = 3
    asm("shr.u32 %0, %1, 3;" : "=r"(t5) : "r"(m5));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p5) : "r"(r5), "r"(t5), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-14 times the code's value (normal and subnormal alike)
    // 0x74007400: 2^14 = 2^(15 - 1): the fp16 and e2m3 exponent biases differ by 14
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d5) : "r"(p5), "r"(0x74007400u));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [3, 3, 7, 7] (0-3 = v46, 4-7 = v52): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x7733;" : "=r"(r6) : "r"(v46), "r"(v52));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 2 exponent and 3 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m6) : "r"(r6), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their fp16 places: mantissa tops aligned
    // shift by 5 - 2 = 3
    asm("shr.u32 %0, %1, 3;" : "=r"(t6) : "r"(m6));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p6) : "r"(r6), "r"(t6), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-14 times the code's value (normal and subnormal alike)
    // 0x74007400: 2^14 = 2^(15 - 1): the fp16 and e2m3 exponent biases differ by 14
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d6) : "r"(p6), "r"(0x74007400u));
    // each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care
    // byte moves [3, 3, 7, 7] (0-3 = v58, 4-7 = w2): each code's top byte into the high byte of its half
    asm("prmt.b32 %0, %1, %2, 0x7733;" : "=r"(r7) : "r"(v58), "r"(w2));
    // the magnitude bits of each code
    // 0x7C007C00: the code's 2 exponent and 3 mantissa bits, under the sign
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(m7) : "r"(r7), "r"(0x7C007C00u), "r"(0x00000000u));
    // exponent and mantissa to their fp16 places: mantissa tops aligned
    // shift by 5 - 2 = 3
    asm("shr.u32 %0, %1, 3;" : "=r"(t7) : "r"(m7));
    // the code's sign back on top
    // 0x80008000: the sign bit of each half
    // immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b
    asm("lop3.b32 %0, %1, %2, %3, 0xEC;" : "=r"(p7) : "r"(r7), "r"(t7), "r"(0x80008000u));
    // exact re-bias: the placed bits read 2^-14 times the code's value (normal and subnormal alike)
    // 0x74007400: 2^14 = 2^(15 - 1): the fp16 and e2m3 exponent biases differ by 14
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d7) : "r"(p7), "r"(0x74007400u));
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

}  // namespace fp6_e2m3_fp16
}  // namespace dqgen


namespace dqgen {
namespace fp6_e2m3_fp16 {

[[maybe_unused]] constexpr int kBlock = 256;

// n consecutive 32-bit words, as 16- or 8-byte accesses when ALIGNED (n = 4 or 2), else one by one.
template <int n, bool ALIGNED>
__device__ __forceinline__ void load_words(unsigned* dst, const unsigned* __restrict__ src) {
    if constexpr (ALIGNED && n % 4 == 0) {
#pragma unroll
        for (int i = 0; i < n; i += 4) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(src + i));
            dst[i] = v.x; dst[i + 1] = v.y; dst[i + 2] = v.z; dst[i + 3] = v.w;
        }
    } else if constexpr (ALIGNED && n == 2) {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(src));
        dst[0] = v.x; dst[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < n; ++i) dst[i] = __ldg(src + i);
    }
}

__device__ __forceinline__ void st_cs_v4(unsigned* dst, unsigned a, unsigned b, unsigned c, unsigned d) {
    asm volatile("st.global.cs.v4.u32 [%0], {" "%1, %2, %3, %4};" :: "l"(dst), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void st_cs_v2(unsigned* dst, unsigned a, unsigned b) {
    asm volatile("st.global.cs.v2.u32 [%0], {" "%1, %2};" :: "l"(dst), "r"(a), "r"(b) : "memory");
}

// STREAM: st.global.cs, the evict-first hint for data this kernel never reads again.
template <int n, bool ALIGNED, bool STREAM = false>
__device__ __forceinline__ void store_words(unsigned* __restrict__ dst, const unsigned* src) {
    if constexpr (ALIGNED && STREAM && n % 4 == 0) {
#pragma unroll
        for (int i = 0; i < n; i += 4)
            st_cs_v4(dst + i, src[i], src[i + 1], src[i + 2], src[i + 3]);
    } else if constexpr (ALIGNED && STREAM && n == 2) {
        st_cs_v2(dst, src[0], src[1]);
    } else if constexpr (ALIGNED && n % 4 == 0) {
#pragma unroll
        for (int i = 0; i < n; i += 4) *reinterpret_cast<uint4*>(dst + i) = make_uint4(src[i], src[i + 1], src[i + 2], src[i + 3]);
    } else if constexpr (ALIGNED && n == 2) {
        *reinterpret_cast<uint2*>(dst) = make_uint2(src[0], src[1]);
    } else {
#pragma unroll
        for (int i = 0; i < n; ++i) dst[i] = src[i];
    }
}

// Tile: ROWS blocks (3 word-rows each, ROWS * 16 rows of K) x (kBlock * VEC) columns; thread t owns VEC
// adjacent columns (VEC = 4: a block yields 8 output pairs per column, so 4 columns keep them in registers).
// Block i of a column is words 3i..3i+2 (each word-row loaded as one 16-byte vector) and holds rows
// 16i..16i+15; PRMT transposes column pairs so that each output row's 4 values leave in one
// 8-byte store, contiguous across the warp.
[[maybe_unused]] constexpr int kOrder[kPerWord] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
[[maybe_unused]] constexpr int kZeroPos[kPerWord] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};  // field of element n % 16 in a zero word
[[maybe_unused]] constexpr unsigned kFieldMask = 0x3Fu;

template <int VEC, int ROWS, bool ALIGNED, bool STREAM>
__device__ __forceinline__ void run(const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales,
                                    const unsigned* __restrict__ zeros, const int* __restrict__ g_idx, unsigned* __restrict__ out,
                                    long long KW, long long N, long long group_size) {
    static_assert(VEC == 4, "4 columns per thread");
    const unsigned short* scales16 = reinterpret_cast<const unsigned short*>(scales);
    unsigned short* out16 = reinterpret_cast<unsigned short*>(out);
    const long long tiles_n = (N + kBlock * VEC - 1) / (kBlock * VEC);
    const long long tiles = tiles_n * ((KW + ROWS - 1) / ROWS);
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const long long n0 = (tile % tiles_n) * (kBlock * VEC) + (long long)threadIdx.x * VEC;
        const long long i0 = (tile / tiles_n) * ROWS;
        if (n0 >= N) continue;
        const bool full = ALIGNED && n0 + VEC <= N;  // a whole 4-column group: vector accesses
        unsigned q[ROWS][kWords][VEC];  // q[r][t][j]: word t of block i0 + r, column n0 + j
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
#pragma unroll
            for (int t = 0; t < kWords; ++t) {
                if (full && i0 + r < KW) {
                    load_words<VEC, true>(q[r][t], qweight + ((i0 + r) * kWords + t) * N + n0);
                } else {
#pragma unroll
                    for (int j = 0; j < VEC; ++j)
                        q[r][t][j] = (i0 + r < KW && n0 + j < N) ? __ldg(qweight + ((i0 + r) * kWords + t) * N + n0 + j) : 0u;
                }
            }
        }
        [[maybe_unused]] long long g_cur = -1;
        unsigned s[VEC][kPairs];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const long long i = i0 + r;
            if (i >= KW) break;
            const long long g = group_size > 0 ? (i * kPerWord) / group_size : 0;
            if (g != g_cur) {
                g_cur = g;
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    const long long n = n0 + j;
                    if (n >= N) continue;
                    // both halves of every pair register hold the column's scale
                    const unsigned sj = (unsigned)scales16[g * N + n] * 0x10001u;
#pragma unroll
                    for (int p = 0; p < kPairs; ++p) s[j][p] = sj;
                }
            }
            unsigned o[VEC][kPairs];
#pragma unroll
            for (int j = 0; j < VEC; ++j) dequant(q[r][0][j], q[r][1][j], q[r][2][j], s[j], o[j]);
#pragma unroll
            for (int p = 0; p < kPairs; ++p) {
                const long long row = i * kPerWord + 2 * p;
                if (full) {
                    unsigned lo[VEC / 2], hi[VEC / 2];
#pragma unroll
                    for (int c = 0; c < VEC / 2; ++c) {
                        asm("prmt.b32 %0, %1, %2, 0x5410;" : "=r"(lo[c]) : "r"(o[2 * c][p]), "r"(o[2 * c + 1][p]));
                        asm("prmt.b32 %0, %1, %2, 0x7632;" : "=r"(hi[c]) : "r"(o[2 * c][p]), "r"(o[2 * c + 1][p]));
                    }
                    store_words<VEC / 2, true, STREAM>(out + (row * N + n0) / 2, lo);
                    store_words<VEC / 2, true, STREAM>(out + ((row + 1) * N + n0) / 2, hi);
                } else {
#pragma unroll
                    for (int j = 0; j < VEC; ++j) {
                        if (n0 + j < N) {
                            out16[row * N + n0 + j] = (unsigned short)(o[j][p] & 0xFFFFu);
                            out16[(row + 1) * N + n0 + j] = (unsigned short)(o[j][p] >> 16);
                        }
                    }
                }
            }
        }
    }
}

}  // namespace fp6_e2m3_fp16
}  // namespace dqgen

extern "C" __global__ void __launch_bounds__(256) dqgen_fp6_e2m3_fp16_v4_r1(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp6_e2m3_fp16::run<4, 1, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp6_e2m3_fp16_v4_r2(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp6_e2m3_fp16::run<4, 2, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp6_e2m3_fp16_v4_r1_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp6_e2m3_fp16::run<4, 1, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp6_e2m3_fp16_v4_r2_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp6_e2m3_fp16::run<4, 2, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp6_e2m3_fp16_v4_r1_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp6_e2m3_fp16::run<4, 1, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp6_e2m3_fp16_v4_r2_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp6_e2m3_fp16::run<4, 2, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

