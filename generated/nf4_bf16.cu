// dqgen standalone dequantize kernel for spec "nf4_bf16" (nf4 -> bf16), generated.
// Do not edit: `dqgen build specs/nf4_bf16.yaml` regenerates it.
//   qweight [K/8, N] int32 (packed along K), scales [G, N] bf16,
//   out [K, N] bf16 row-major; G = K / group_size (1 when group_size == -1).
// Index arithmetic is 64-bit throughout; any shape the packing allows is handled (tails are guarded).
// Entry points dqgen_nf4_bf16_v<VEC>_r<ROWS>[_u]: each thread converts ROWS rows x VEC words, all of
// its loads issued before any conversion (memory-level parallelism), one scale/zero-point preparation
// per group; "_u" variants make only 4-byte accesses, for base pointers that are not 16-byte aligned.

// dqgen device converter for spec "nf4_bf16" (nf4 -> bf16), generated from its Plan.
// Do not edit: `dqgen build specs/nf4_bf16.yaml` regenerates it.
//
// Input word: 8 codes of 4 bits; field j holds element order[j], order = [0, 1, 2, 3, 4, 5, 6, 7].
// value = bf16( q * s ), rounded once to nearest-even.
// Plan: lut; 23 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_80 or newer. Outputs are bf16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace nf4_bf16 {

[[maybe_unused]] constexpr int kBits = 4;
[[maybe_unused]] constexpr int kPerWord = 8;
[[maybe_unused]] constexpr int kPairs = 4;
[[maybe_unused]] constexpr int kZeroRegs = 0;

// The conversion: one packed word -> 4 bf16x2 registers holding the exact code values.
__device__ __forceinline__ void convert(unsigned w, unsigned* d) {
    unsigned sel, top3, top, msk0, ha0, hb0, h0, la0, lb0, l0, sel1, top1, msk1, ha1, hb1, h1, la1, lb1, l1, d0, d1, d2, d3;
    // PRMT selectors: a code's low 3 bits index 8 table bytes; bit 3 would mean 'replicate the sign', so it is cleared
    // 0x77777777: the low 3 bits of every 4-bit code
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(sel) : "r"(w), "r"(0x77777777u), "r"(0x00000000u));
    // every code's bit 3 down to bit 0 of its nibble
    // shift by 3
    asm("shr.u32 %0, %1, 3;" : "=r"(top3) : "r"(w));
    // per code: 1 if it indexes entries 8..15
    // 0x11111111: bit 0 of every nibble
    // 0x00000000: zero bytes
    // immLut = 0xF0 & 0xCC: d = a & b
    asm("lop3.b32 %0, %1, %2, %3, 0xC0;" : "=r"(top) : "r"(top3), "r"(0x11111111u), "r"(0x00000000u));
    // per code: 0xFF if its code is 8..15, else 0
    // 0x0000FF00: byte 0 = 0x00, byte 1 = 0xFF: the PRMT turns each 0/1 nibble into a byte mask
    // 0x00000000: zero bytes
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(msk0) : "r"(0x0000FF00u), "r"(0x00000000u), "r"(top));
    // high bytes of entries (code & 7) for 4 codes
    // 0xBEBFBFBF: high bytes of codebook entries {0..3}
    // 0x00BDBEBE: high bytes of codebook entries {4..7}
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(ha0) : "r"(0xBEBFBFBFu), "r"(0x00BDBEBEu), "r"(sel));
    // high bytes of entries 8 + (code & 7) for 4 codes
    // 0x3E3E3E3D: high bytes of codebook entries {8..11}
    // 0x3F3F3F3E: high bytes of codebook entries {12..15}
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(hb0) : "r"(0x3E3E3E3Du), "r"(0x3F3F3F3Eu), "r"(sel));
    // per code: the entry 0..7 or 8..15 by its bit 3
    // immLut = (0xF0 & ~0xAA) | (0xCC & 0xAA): d = c ? b : a, bit by bit
    asm("lop3.b32 %0, %1, %2, %3, 0xD8;" : "=r"(h0) : "r"(ha0), "r"(hb0), "r"(msk0));
    // low bytes of entries (code & 7) for 4 codes
    // 0xCA063280: low bytes of codebook entries {0..3}
    // 0x00BA3D92: low bytes of codebook entries {4..7}
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(la0) : "r"(0xCA063280u), "r"(0x00BA3D92u), "r"(sel));
    // low bytes of entries 8 + (code & 7) for 4 codes
    // 0xAD7C25A3: low bytes of codebook entries {8..11}
    // 0x803910E2: low bytes of codebook entries {12..15}
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(lb0) : "r"(0xAD7C25A3u), "r"(0x803910E2u), "r"(sel));
    // per code: the entry 0..7 or 8..15 by its bit 3
    // immLut = (0xF0 & ~0xAA) | (0xCC & 0xAA): d = c ? b : a, bit by bit
    asm("lop3.b32 %0, %1, %2, %3, 0xD8;" : "=r"(l0) : "r"(la0), "r"(lb0), "r"(msk0));
    // selectors of codes 4..7 into the low 16 bits (PRMT reads only those)
    // shift by 16
    asm("shr.u32 %0, %1, 16;" : "=r"(sel1) : "r"(sel));
    // bit 3 of codes 4..7 into the low 16 bits
    // shift by 16
    asm("shr.u32 %0, %1, 16;" : "=r"(top1) : "r"(top));
    // per code: 0xFF if its code is 8..15, else 0
    // 0x0000FF00: byte 0 = 0x00, byte 1 = 0xFF: the PRMT turns each 0/1 nibble into a byte mask
    // 0x00000000: zero bytes
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(msk1) : "r"(0x0000FF00u), "r"(0x00000000u), "r"(top1));
    // high bytes of entries (code & 7) for 4 codes
    // 0xBEBFBFBF: high bytes of codebook entries {0..3}
    // 0x00BDBEBE: high bytes of codebook entries {4..7}
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(ha1) : "r"(0xBEBFBFBFu), "r"(0x00BDBEBEu), "r"(sel1));
    // high bytes of entries 8 + (code & 7) for 4 codes
    // 0x3E3E3E3D: high bytes of codebook entries {8..11}
    // 0x3F3F3F3E: high bytes of codebook entries {12..15}
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(hb1) : "r"(0x3E3E3E3Du), "r"(0x3F3F3F3Eu), "r"(sel1));
    // per code: the entry 0..7 or 8..15 by its bit 3
    // immLut = (0xF0 & ~0xAA) | (0xCC & 0xAA): d = c ? b : a, bit by bit
    asm("lop3.b32 %0, %1, %2, %3, 0xD8;" : "=r"(h1) : "r"(ha1), "r"(hb1), "r"(msk1));
    // low bytes of entries (code & 7) for 4 codes
    // 0xCA063280: low bytes of codebook entries {0..3}
    // 0x00BA3D92: low bytes of codebook entries {4..7}
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(la1) : "r"(0xCA063280u), "r"(0x00BA3D92u), "r"(sel1));
    // low bytes of entries 8 + (code & 7) for 4 codes
    // 0xAD7C25A3: low bytes of codebook entries {8..11}
    // 0x803910E2: low bytes of codebook entries {12..15}
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(lb1) : "r"(0xAD7C25A3u), "r"(0x803910E2u), "r"(sel1));
    // per code: the entry 0..7 or 8..15 by its bit 3
    // immLut = (0xF0 & ~0xAA) | (0xCC & 0xAA): d = c ? b : a, bit by bit
    asm("lop3.b32 %0, %1, %2, %3, 0xD8;" : "=r"(l1) : "r"(la1), "r"(lb1), "r"(msk1));
    // bf16x2 pair: each element's low and high table byte side by side
    // byte moves [4, 0, 5, 1]
    asm("prmt.b32 %0, %1, %2, 0x1504;" : "=r"(d0) : "r"(h0), "r"(l0));
    // bf16x2 pair: each element's low and high table byte side by side
    // byte moves [6, 2, 7, 3]
    asm("prmt.b32 %0, %1, %2, 0x3726;" : "=r"(d1) : "r"(h0), "r"(l0));
    // bf16x2 pair: each element's low and high table byte side by side
    // byte moves [4, 0, 5, 1]
    asm("prmt.b32 %0, %1, %2, 0x1504;" : "=r"(d2) : "r"(h1), "r"(l1));
    // bf16x2 pair: each element's low and high table byte side by side
    // byte moves [6, 2, 7, 3]
    asm("prmt.b32 %0, %1, %2, 0x3726;" : "=r"(d3) : "r"(h1), "r"(l1));
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

}  // namespace nf4_bf16
}  // namespace dqgen


namespace dqgen {
namespace nf4_bf16 {

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

}  // namespace nf4_bf16
}  // namespace dqgen

extern "C" __global__ void __launch_bounds__(256) dqgen_nf4_bf16_v8_r1(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::nf4_bf16::run<8, 1, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_nf4_bf16_v8_r2(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::nf4_bf16::run<8, 2, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_nf4_bf16_v8_r4(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::nf4_bf16::run<8, 4, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_nf4_bf16_v8_r1_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::nf4_bf16::run<8, 1, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_nf4_bf16_v8_r2_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::nf4_bf16::run<8, 2, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_nf4_bf16_v8_r4_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::nf4_bf16::run<8, 4, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_nf4_bf16_v8_r2_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::nf4_bf16::run<8, 2, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_nf4_bf16_v8_r4_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::nf4_bf16::run<8, 4, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

