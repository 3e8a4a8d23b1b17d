// dqgen standalone dequantize kernel for spec "gptq_int4_fp16" (u4b8 -> fp16), generated.
// Do not edit: `dqgen build specs/gptq_int4_fp16.yaml` regenerates it.
//   qweight [K/8, N] int32 (packed along K), scales [G, N] fp16,
//   out [K, N] fp16 row-major; G = K / group_size (1 when group_size == -1).
// Index arithmetic is 64-bit throughout; any shape the packing allows is handled (tails are guarded).
// Entry points dqgen_gptq_int4_fp16_v<VEC>_r<ROWS>[_u]: each thread converts ROWS rows x VEC words, all of
// its loads issued before any conversion (memory-level parallelism), one scale/zero-point preparation
// per group; "_u" variants make only 4-byte accesses, for base pointers that are not 16-byte aligned.

// dqgen device converter for spec "gptq_int4_fp16" (u4b8 -> fp16), generated from its Plan.
// Do not edit: `dqgen build specs/gptq_int4_fp16.yaml` regenerates it.
//
// Input word: 8 codes of 4 bits; field j holds element order[j], order = [0, 1, 2, 3, 4, 5, 6, 7].
// value = fp16( q * s ), rounded once to nearest-even.
// Plan: lanes; 12 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_53 or newer. Outputs are fp16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace gptq_int4_fp16 {

[[maybe_unused]] constexpr int kBits = 4;
[[maybe_unused]] constexpr int kPerWord = 8;
[[maybe_unused]] constexpr int kPairs = 4;
[[maybe_unused]] constexpr int kZeroRegs = 0;

// The conversion: one packed word -> 4 fp16x2 registers holding the exact integers q.
__device__ __forceinline__ void convert(unsigned w, unsigned* d) {
    unsigned p0, x0, d0, p1, x1, d1, p2, x2, d2, p3, x3, d3;
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 0, 0] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x0;" : "=r"(p0) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 4)
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x0) : "r"(p0), "r"(0x00F0000Fu), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 8) = code value, exact
    // 0x2C003C00: {1, 1/16}: undo the field's position 2^p in each half
    // 0xD480E408: -(1024/2^p + 8) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d0) : "r"(x0), "r"(0x2C003C00u), "r"(0xD480E408u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 1, 1] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x1111;" : "=r"(p1) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 4)
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x1) : "r"(p1), "r"(0x00F0000Fu), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 8) = code value, exact
    // 0x2C003C00: {1, 1/16}: undo the field's position 2^p in each half
    // 0xD480E408: -(1024/2^p + 8) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d1) : "r"(x1), "r"(0x2C003C00u), "r"(0xD480E408u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [2, 2, 2, 2] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x2222;" : "=r"(p2) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 4)
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x2) : "r"(p2), "r"(0x00F0000Fu), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 8) = code value, exact
    // 0x2C003C00: {1, 1/16}: undo the field's position 2^p in each half
    // 0xD480E408: -(1024/2^p + 8) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d2) : "r"(x2), "r"(0x2C003C00u), "r"(0xD480E408u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [3, 3, 3, 3] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x3333;" : "=r"(p3) : "r"(w), "r"(w));
    // 1024 + field*2^p in each half (p = 0, 4)
    // 0x00F0000F: mask: the 4-bit fields at bit 0 of the low half and bit 4 of the high half
    // 0x64006400: magic fp16x2 {1024, 1024}: exponent field 25 = 15+10 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x3) : "r"(p3), "r"(0x00F0000Fu), "r"(0x64006400u));
    // (1024 + field*2^p)/2^p - (1024/2^p + 8) = code value, exact
    // 0x2C003C00: {1, 1/16}: undo the field's position 2^p in each half
    // 0xD480E408: -(1024/2^p + 8) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d3) : "r"(x3), "r"(0x2C003C00u), "r"(0xD480E408u));
    d[0] = d0;
    d[1] = d1;
    d[2] = d2;
    d[3] = d3;
}

// convert, then scale: out[i] = round(d[i] * s[i]); s[i] holds the scales of elements 2i, 2i+1.
__device__ __forceinline__ void dequant(unsigned w, const unsigned* s, unsigned* out) {
    unsigned d[kPairs];
    convert(w, d);
    const unsigned d0 = d[0];
    const unsigned d1 = d[1];
    const unsigned d2 = d[2];
    const unsigned d3 = d[3];
    const unsigned s0 = s[0];
    const unsigned s1 = s[1];
    const unsigned s2 = s[2];
    const unsigned s3 = s[3];
    unsigned out0, out1, out2, out3;
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out0) : "r"(d0), "r"(s0));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out1) : "r"(d1), "r"(s1));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out2) : "r"(d2), "r"(s2));
    // (code - zero) * scale, rounded once to nearest-even fp16
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out3) : "r"(d3), "r"(s3));
    out[0] = out0;
    out[1] = out1;
    out[2] = out2;
    out[3] = out3;
}

}  // namespace gptq_int4_fp16
}  // namespace dqgen


namespace dqgen {
namespace gptq_int4_fp16 {

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

// Tile: ROWS word-rows (ROWS * 8 rows of K) x (kBlock * 8) columns; thread t owns 8 adjacent
// columns. A word holds 8 rows of one column; PRMT transposes column pairs so that each
// output row's 8 values leave in one 16-byte store, contiguous across the warp.
[[maybe_unused]] constexpr int kOrder[kPerWord] = {0, 1, 2, 3, 4, 5, 6, 7};
[[maybe_unused]] constexpr int kZeroPos[kPerWord] = {0, 1, 2, 3, 4, 5, 6, 7};  // field of element n % 8 in a zero word
[[maybe_unused]] constexpr unsigned kFieldMask = 0xFu;

template <int VEC, int ROWS, bool ALIGNED, bool STREAM>
__device__ __forceinline__ void run(const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales,
                                    const unsigned* __restrict__ zeros, const int* __restrict__ g_idx, unsigned* __restrict__ out,
                                    long long KW, long long N, long long group_size) {
    static_assert(VEC == 8, "8 columns per thread");
    const unsigned short* scales16 = reinterpret_cast<const unsigned short*>(scales);
    unsigned short* out16 = reinterpret_cast<unsigned short*>(out);
    const long long tiles_n = (N + kBlock * VEC - 1) / (kBlock * VEC);
    const long long tiles = tiles_n * ((KW + ROWS - 1) / ROWS);
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const long long n0 = (tile % tiles_n) * (kBlock * VEC) + (long long)threadIdx.x * VEC;
        const long long i0 = (tile / tiles_n) * ROWS;
        if (n0 >= N) continue;
        const bool full = ALIGNED && n0 + VEC <= N;  // a whole 8-column group: vector accesses
        unsigned q[ROWS][VEC];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            if (full && i0 + r < KW) {
                load_words<VEC, true>(q[r], qweight + (i0 + r) * N + n0);
            } else {
#pragma unroll
                for (int j = 0; j < VEC; ++j) q[r][j] = (i0 + r < KW && n0 + j < N) ? __ldg(qweight + (i0 + r) * N + n0 + j) : 0u;
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
            for (int j = 0; j < VEC; ++j) dequant(q[r][j], s[j], o[j]);
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

}  // namespace gptq_int4_fp16
}  // namespace dqgen

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_int4_fp16_v8_r1(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_int4_fp16::run<8, 1, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_int4_fp16_v8_r2(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_int4_fp16::run<8, 2, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_int4_fp16_v8_r4(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_int4_fp16::run<8, 4, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_int4_fp16_v8_r1_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_int4_fp16::run<8, 1, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_int4_fp16_v8_r2_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_int4_fp16::run<8, 2, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_int4_fp16_v8_r4_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_int4_fp16::run<8, 4, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_int4_fp16_v8_r2_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_int4_fp16::run<8, 2, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_gptq_int4_fp16_v8_r4_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::gptq_int4_fp16::run<8, 4, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

