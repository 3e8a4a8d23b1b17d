// dqgen standalone dequantize kernel for spec "trtllm_u2b2_fp16" (u2b2 -> fp16), generated.
// Do not edit: `dqgen build specs/trtllm_u2b2_fp16.yaml` regenerates it.
//   qweight [K, N/16] int32 (packed along N), scales [G, N] fp16,
//   out [K, N] fp16 row-major; G = K / group_size (1 when group_size == -1).
// Index arithmetic is 64-bit throughout; any shape the packing allows is handled (tails are guarded).
// Entry points dqgen_trtllm_u2b2_fp16_v<VEC>_r<ROWS>[_u]: each thread converts ROWS rows x VEC words, all of
// its loads issued before any conversion (memory-level parallelism), one scale/zero-point preparation
// per group; "_u" variants make only 4-byte accesses, for base pointers that are not 16-byte aligned.

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


namespace dqgen {
namespace trtllm_u2b2_fp16 {

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

// Tile: ROWS rows x (kBlock * VEC) words; thread t owns words c0 + t + j*kBlock, so every warp access
// is contiguous: 4-byte weight loads, 32-byte scale loads and output stores per word.
// scales and out are addressed as fp16x2 pairs: a row of N elements is W * kPairs pairs.
template <int VEC, int ROWS, bool ALIGNED, bool STREAM>
__device__ __forceinline__ void run(const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales,
                                    const unsigned* __restrict__ zeros, const int* __restrict__ g_idx, unsigned* __restrict__ out,
                                    long long K, long long W, long long group_size) {
    const long long tiles_c = (W + kBlock * VEC - 1) / (kBlock * VEC);
    const long long tiles = tiles_c * ((K + ROWS - 1) / ROWS);
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const long long c0 = (tile % tiles_c) * (kBlock * VEC) + threadIdx.x;
        const long long k0 = (tile / tiles_c) * ROWS;
        unsigned q[ROWS][VEC];
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const long long c = c0 + (long long)j * kBlock;
                q[r][j] = (k0 + r < K && c < W) ? __ldg(qweight + (k0 + r) * W + c) : 0u;
            }
        long long g_cur = -1;
        unsigned s[VEC][kPairs];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const long long k = k0 + r;
            if (k >= K) break;
            const long long g = group_size > 0 ? k / group_size : 0;
            if (g != g_cur) {  // once per tile unless the tile straddles a group boundary
                g_cur = g;
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    const long long c = c0 + (long long)j * kBlock;
                    if (c < W) {
                        load_words<kPairs, ALIGNED>(s[j], scales + (g * W + c) * kPairs);
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const long long c = c0 + (long long)j * kBlock;
                if (c < W) {
                    unsigned o[kPairs];
                    dequant(q[r][j], s[j], o);
                    store_words<kPairs, ALIGNED, STREAM>(out + (k * W + c) * kPairs, o);
                }
            }
        }
    }
}

}  // namespace trtllm_u2b2_fp16
}  // namespace dqgen

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v1_r1(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<1, 1, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v1_r2(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<1, 2, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v1_r4(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<1, 4, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v1_r8(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<1, 8, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v2_r4(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<2, 4, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v1_r1_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<1, 1, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v1_r2_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<1, 2, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v1_r4_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<1, 4, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v1_r8_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<1, 8, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v2_r4_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<2, 4, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v1_r4_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<1, 4, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v1_r8_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<1, 8, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v1_r16_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<1, 16, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v2_r4_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<2, 4, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_trtllm_u2b2_fp16_v2_r8_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::trtllm_u2b2_fp16::run<2, 8, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

