// dqgen standalone dequantize kernel for spec "fp8_e4m3_fp16" (e4m3 -> fp16), generated.
// Do not edit: `dqgen build specs/fp8_e4m3_fp16.yaml` regenerates it.
//   qweight [K, N/4] int32 (packed along N), scales [G, N] fp16,
//   out [K, N] fp16 row-major; G = K / group_size (1 when group_size == -1).
// Index arithmetic is 64-bit throughout; any shape the packing allows is handled (tails are guarded).
// Entry points dqgen_fp8_e4m3_fp16_v<VEC>_r<ROWS>[_u]: each thread converts ROWS rows x VEC words, all of
// its loads issued before any conversion (memory-level parallelism), one scale/zero-point preparation
// per group; "_u" variants make only 4-byte accesses, for base pointers that are not 16-byte aligned.

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


namespace dqgen {
namespace fp8_e4m3_fp16 {

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
// is contiguous: 4-byte weight loads, 8-byte scale loads and output stores per word.
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

}  // namespace fp8_e4m3_fp16
}  // namespace dqgen

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v1_r1(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<1, 1, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v1_r2(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<1, 2, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v1_r4(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<1, 4, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v1_r8(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<1, 8, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v2_r4(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<2, 4, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v1_r1_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<1, 1, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v1_r2_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<1, 2, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v1_r4_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<1, 4, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v1_r8_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<1, 8, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v2_r4_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<2, 4, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v1_r4_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<1, 4, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v1_r8_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<1, 8, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v1_r16_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<1, 16, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v2_r4_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<2, 4, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_fp8_e4m3_fp16_v2_r8_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::fp8_e4m3_fp16::run<2, 8, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

