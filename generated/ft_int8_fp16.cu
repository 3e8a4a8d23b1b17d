// dqgen standalone dequantize kernel for spec "ft_int8_fp16" (u8b128 -> fp16), generated.
// Do not edit: `dqgen build specs/ft_int8_fp16.yaml` regenerates it.
//   qweight [K, N/4] int32 (packed along N), scales [G, N] fp16,
//   out [K, N] fp16 row-major; G = K / group_size (1 when group_size == -1).
// Index arithmetic is 64-bit throughout. Entry points: dqgen_ft_int8_fp16_v<VEC>_r<ROWS>, where VEC is
// the number of words per thread along the contiguous axis (16-byte loads when > 1) and ROWS the
// rows per thread (one scale/zero-point preparation serves all ROWS rows of a group).

// dqgen device converter for spec "ft_int8_fp16" (u8b128 -> fp16), generated from its Plan.
// Do not edit: `dqgen build specs/ft_int8_fp16.yaml` regenerates it.
//
// Input word: 4 codes of 8 bits; field j holds element order[j], order = [0, 2, 1, 3].
// value = fp16( q * s ), rounded once to nearest-even.
// Plan: lanes; 8 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Requires sm_53 or newer. Outputs are fp16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace ft_int8_fp16 {

constexpr int kBits = 8;
constexpr int kPerWord = 4;
constexpr int kPairs = 2;
constexpr int kZeroRegs = 0;

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


namespace dqgen {
namespace ft_int8_fp16 {

__device__ __forceinline__ void load_u32(unsigned* dst, const unsigned* __restrict__ src, int n, bool vec) {
    if (vec) {
        for (int i = 0; i < n; i += 4) {
            const uint4 v = *reinterpret_cast<const uint4*>(src + i);
            dst[i] = v.x; dst[i + 1] = v.y; dst[i + 2] = v.z; dst[i + 3] = v.w;
        }
    } else {
        for (int i = 0; i < n; ++i) dst[i] = src[i];
    }
}

__device__ __forceinline__ void store_u32(unsigned* __restrict__ dst, const unsigned* src, int n, bool vec) {
    if (vec) {
        for (int i = 0; i < n; i += 4) *reinterpret_cast<uint4*>(dst + i) = make_uint4(src[i], src[i + 1], src[i + 2], src[i + 3]);
    } else {
        for (int i = 0; i < n; ++i) dst[i] = src[i];
    }
}

// Thread tile: ROWS rows x VEC words of one row band. W = N / 4 words per row.
// scales/out are addressed as fp16x2 pairs (N/2 per row).
template <int VEC, int ROWS>
__device__ __forceinline__ void run(const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales,
                                    const unsigned* __restrict__ zeros, unsigned* __restrict__ out,
                                    long long K, long long W, long long group_size) {
    constexpr bool kVec = VEC > 1;
    const long long tiles_w = W / VEC;
    const long long tiles = ((K + ROWS - 1) / ROWS) * tiles_w;
    const long long pairs_per_row = W * kPairs;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < tiles; t += (long long)gridDim.x * blockDim.x) {
        const long long w0 = (t % tiles_w) * VEC;
        const long long k0 = (t / tiles_w) * ROWS;
        long long g_prev = -1;
        unsigned s[VEC * kPairs];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const long long k = k0 + r;
            if (k >= K) break;
            const long long g = group_size > 0 ? k / group_size : 0;
            if (g != g_prev) {
                g_prev = g;
                load_u32(s, scales + g * pairs_per_row + w0 * kPairs, VEC * kPairs, kVec);
            }
            unsigned q[VEC];
            load_u32(q, qweight + k * W + w0, VEC, kVec);
            unsigned o[VEC * kPairs];
#pragma unroll
            for (int j = 0; j < VEC; ++j) dequant(q[j], s + j * kPairs, o + j * kPairs);
            store_u32(out + k * pairs_per_row + w0 * kPairs, o, VEC * kPairs, kVec);
        }
    }
}

}  // namespace ft_int8_fp16
}  // namespace dqgen

extern "C" __global__ void __launch_bounds__(256) dqgen_ft_int8_fp16_v1_r1(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::ft_int8_fp16::run<1, 1>(qweight, scales, zeros, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_ft_int8_fp16_v4_r1(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::ft_int8_fp16::run<4, 1>(qweight, scales, zeros, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_ft_int8_fp16_v4_r2(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::ft_int8_fp16::run<4, 2>(qweight, scales, zeros, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_ft_int8_fp16_v4_r4(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::ft_int8_fp16::run<4, 4>(qweight, scales, zeros, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_ft_int8_fp16_v4_r8(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::ft_int8_fp16::run<4, 8>(qweight, scales, zeros, out, rows, cols, group_size);
}

