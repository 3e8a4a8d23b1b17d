// dqgen standalone dequantize kernel for spec "awq_int4_bf16" (u4 -> bf16), generated.
// Do not edit: `dqgen build specs/awq_int4_bf16.yaml` regenerates it.
//   qweight [K, N/8] int32 (packed along N), scales [G, N] bf16, qzeros [G, N/8] int32 (integer),
//   out [K, N] bf16 row-major; G = K / group_size (1 when group_size == -1).
// Index arithmetic is 64-bit throughout; any shape the packing allows is handled (tails are guarded).
// Entry points dqgen_awq_int4_bf16_v<VEC>_r<ROWS>[_u]: each thread converts ROWS rows x VEC words, all of
// its loads issued before any conversion (memory-level parallelism), one scale/zero-point preparation
// per group; "_u" variants make only 4-byte accesses, for base pointers that are not 16-byte aligned.

// dqgen device converter for spec "awq_int4_bf16" (u4 -> bf16), generated from its Plan.
// Do not edit: `dqgen build specs/awq_int4_bf16.yaml` regenerates it.
//
// Input word: 8 codes of 4 bits; field j holds element order[j], order = [0, 2, 4, 6, 1, 3, 5, 7].
// value = bf16( (q - z) * s ), rounded once to nearest-even.
// Plan: lanes; 11 conversion ops per 8 outputs, 7 zero-point ops per zero word.
// Proof: every code at every lane with every zero point and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: integer.
// Requires sm_80 or newer. Outputs are bf16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace awq_int4_bf16 {

[[maybe_unused]] constexpr int kBits = 4;
[[maybe_unused]] constexpr int kPerWord = 8;
[[maybe_unused]] constexpr int kPairs = 4;
[[maybe_unused]] constexpr int kZeroRegs = 4;

// Once per (group, zero word): the zero points of this word's 8 columns, prepared so
// that the conversion subtracts magic and zero point in one op.
__device__ __forceinline__ void prepare_zeros(unsigned z, unsigned* zr) {
    unsigned z_s4, zr0, zr1, zp2, zr2, zp3, zr3;
    // bring fields 4 bits down, to where a mask can reach them
    // shift by 4
    asm("shr.u32 %0, %1, 4;" : "=r"(z_s4) : "r"(z));
    // 128 + z*2^p in each half
    // 0x000F000F: mask: the 4-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr0) : "r"(z), "r"(0x000F000Fu), "r"(0x43004300u));
    // 128 + z*2^p in each half
    // 0x000F000F: mask: the 4-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr1) : "r"(z_s4), "r"(0x000F000Fu), "r"(0x43004300u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 3, 3] (result byte k <- source byte picks[k]; 0-3 = z, 4-7 = z)
    asm("prmt.b32 %0, %1, %2, 0x3311;" : "=r"(zp2) : "r"(z), "r"(z));
    // 128 + z*2^p in each half
    // 0x000F000F: mask: the 4-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr2) : "r"(zp2), "r"(0x000F000Fu), "r"(0x43004300u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 3, 3] (result byte k <- source byte picks[k]; 0-3 = z_s4, 4-7 = z_s4)
    asm("prmt.b32 %0, %1, %2, 0x3311;" : "=r"(zp3) : "r"(z_s4), "r"(z_s4));
    // 128 + z*2^p in each half
    // 0x000F000F: mask: the 4-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(zr3) : "r"(zp3), "r"(0x000F000Fu), "r"(0x43004300u));
    zr[0] = zr0;
    zr[1] = zr1;
    zr[2] = zr2;
    zr[3] = zr3;
}

// The conversion: one packed word -> 4 bf16x2 registers holding the exact integers (q - z).
__device__ __forceinline__ void convert(unsigned w, const unsigned* zr, unsigned* d) {
    const unsigned zr0 = zr[0];
    const unsigned zr1 = zr[1];
    const unsigned zr2 = zr[2];
    const unsigned zr3 = zr[3];
    unsigned w_s4, x0, d0, x1, d1, p2, x2, d2, p3, x3, d3;
    // bring fields 4 bits down, to where a mask can reach them
    // shift by 4
    asm("shr.u32 %0, %1, 4;" : "=r"(w_s4) : "r"(w));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x000F000F: mask: the 4-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x0) : "r"(w), "r"(0x000F000Fu), "r"(0x43004300u));
    // (128 + q) - (128 + z) = q - z, exact (the zero point is folded into the magic subtraction)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d0) : "r"(zr0), "r"(0xBF80BF80u), "r"(x0));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x000F000F: mask: the 4-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x1) : "r"(w_s4), "r"(0x000F000Fu), "r"(0x43004300u));
    // (128 + q) - (128 + z) = q - z, exact (the zero point is folded into the magic subtraction)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d1) : "r"(zr1), "r"(0xBF80BF80u), "r"(x1));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 3, 3] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w)
    asm("prmt.b32 %0, %1, %2, 0x3311;" : "=r"(p2) : "r"(w), "r"(w));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x000F000F: mask: the 4-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x2) : "r"(p2), "r"(0x000F000Fu), "r"(0x43004300u));
    // (128 + q) - (128 + z) = q - z, exact (the zero point is folded into the magic subtraction)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d2) : "r"(zr2), "r"(0xBF80BF80u), "r"(x2));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 3, 3] (result byte k <- source byte picks[k]; 0-3 = w_s4, 4-7 = w_s4)
    asm("prmt.b32 %0, %1, %2, 0x3311;" : "=r"(p3) : "r"(w_s4), "r"(w_s4));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x000F000F: mask: the 4-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x3) : "r"(p3), "r"(0x000F000Fu), "r"(0x43004300u));
    // (128 + q) - (128 + z) = q - z, exact (the zero point is folded into the magic subtraction)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d3) : "r"(zr3), "r"(0xBF80BF80u), "r"(x3));
    d[0] = d0;
    d[1] = d1;
    d[2] = d2;
    d[3] = d3;
}

// convert, then scale: out[i] = round(d[i] * s[i]); s[i] holds the scales of elements 2i, 2i+1.
__device__ __forceinline__ void dequant(unsigned w, const unsigned* zr, const unsigned* s, unsigned* out) {
    unsigned d[kPairs];
    convert(w, zr, d);
    const unsigned d0 = d[0];
    const unsigned d1 = d[1];
    const unsigned d2 = d[2];
    const unsigned d3 = d[3];
    const unsigned s0 = s[0];
    const unsigned s1 = s[1];
    const unsigned s2 = s[2];
    const unsigned s3 = s[3];
    unsigned out0, out1, out2, out3;
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
    out[0] = out0;
    out[1] = out1;
    out[2] = out2;
    out[3] = out3;
}

}  // namespace awq_int4_bf16
}  // namespace dqgen


namespace dqgen {
namespace awq_int4_bf16 {

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
// is contiguous: 4-byte weight loads, 16-byte scale loads and output stores per word.
// scales and out are addressed as bf16x2 pairs: a row of N elements is W * kPairs pairs.
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
        unsigned zr[VEC][kZeroRegs > 0 ? kZeroRegs : 1];
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
                        prepare_zeros(__ldg(zeros + g * W + c), zr[j]);
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const long long c = c0 + (long long)j * kBlock;
                if (c < W) {
                    unsigned o[kPairs];
                    dequant(q[r][j], zr[j], s[j], o);
                    store_words<kPairs, ALIGNED, STREAM>(out + (k * W + c) * kPairs, o);
                }
            }
        }
    }
}

}  // namespace awq_int4_bf16
}  // namespace dqgen

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v1_r1(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<1, 1, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v1_r2(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<1, 2, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v1_r4(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<1, 4, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v1_r8(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<1, 8, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v2_r4(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<2, 4, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v1_r1_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<1, 1, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v1_r2_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<1, 2, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v1_r4_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<1, 4, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v1_r8_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<1, 8, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v2_r4_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<2, 4, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v1_r4_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<1, 4, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v1_r8_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<1, 8, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v1_r16_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<1, 16, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v2_r4_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<2, 4, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_awq_int4_bf16_v2_r8_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::awq_int4_bf16::run<2, 8, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

