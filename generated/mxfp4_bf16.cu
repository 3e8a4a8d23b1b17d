// dqgen standalone dequantize kernel for spec "mxfp4_bf16" (e2m1 -> bf16), generated.
// Do not edit: `dqgen build specs/mxfp4_bf16.yaml` regenerates it.
//   qweight [K/8, N] int32 (packed along K), scales [K/32, N] uint8 (e8m0 block-scale codes),
//   out [K, N] bf16 row-major; G = K / group_size (1 when group_size == -1).
// Index arithmetic is 64-bit throughout; any shape the packing allows is handled (tails are guarded).
// Entry points dqgen_mxfp4_bf16_v<VEC>_r<ROWS>[_u]: each thread converts ROWS rows x VEC words, all of
// its loads issued before any conversion (memory-level parallelism), one scale/zero-point preparation
// per group; "_u" variants make only 4-byte accesses, for base pointers that are not 16-byte aligned.

// dqgen device converter for spec "mxfp4_bf16" (e2m1 -> bf16), generated from its Plan.
// Do not edit: `dqgen build specs/mxfp4_bf16.yaml` regenerates it.
//
// Input word: 8 codes of 4 bits; field j holds element order[j], order = [0, 1, 2, 3, 4, 5, 6, 7].
// value = bf16( q * 2^(E - 127) ), E the block's e8m0 scale byte (0xFF: NaN), rounded once to nearest-even.
// Plan: lut; 15 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_80 or newer. Outputs are bf16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace mxfp4_bf16 {

[[maybe_unused]] constexpr int kBits = 4;
[[maybe_unused]] constexpr int kPerWord = 8;
[[maybe_unused]] constexpr int kPairs = 4;
[[maybe_unused]] constexpr int kZeroRegs = 0;
[[maybe_unused]] constexpr int kScaleRegs = 1;  // registers prepare_scales fills

// Once per (block of 32 rows, column): the block's e8m0 scale byte sc, decoded into the kScaleRegs registers that the scale stage multiplies by.
__device__ __forceinline__ void prepare_scales(unsigned sc, unsigned* sr) {
    unsigned sc_h, sc_d, sc_f, sc_e, scale;
    // the scale code shifted by one, to compare neighbouring bits
    // shift by 1
    asm("shr.u32 %0, %1, 1;" : "=r"(sc_h) : "r"(sc));
    // 0 exactly when all 8 bits are equal: E = 0x00 or 0xFF
    // 0x0000007F: the code's 8 bits compared pairwise
    // immLut = (0xF0 ^ 0xCC) & 0xAA: d = (a ^ b) & c
    asm("lop3.b32 %0, %1, %2, %3, 0x28;" : "=r"(sc_d) : "r"(sc), "r"(sc_h), "r"(0x0000007Fu));
    // all ones for E = 0x00 (2^-127, an fp32 subnormal) and E = 0xFF (NaN)
    // 0x00000000: zero bytes
    asm("set.eq.u32.u32 %0, %1, %2;" : "=r"(sc_f) : "r"(sc_d), "r"(0x00000000u));
    // E into the fp32 exponent field: 2^(E-127) for 1 <= E <= 254
    // shift by 23
    asm("shl.b32 %0, %1, 23;" : "=r"(sc_e) : "r"(sc));
    // 2^(E-127) as fp32, NaN for 0xFF
    // 0x00400000: the top fp32 mantissa bit: 0 -> 2^-127, inf -> NaN
    // immLut = 0xF0 | (0xCC & 0xAA): d = a | (b & c)
    asm("lop3.b32 %0, %1, %2, %3, 0xF8;" : "=r"(scale) : "r"(sc_e), "r"(sc_f), "r"(0x00400000u));
    sr[0] = scale;
}

// The conversion: one packed word -> 4 bf16x2 registers holding the exact code values.
__device__ __forceinline__ void convert(unsigned w, unsigned* d) {
    unsigned sel, top3, top, msk0, ha0, hs0, sel1, top1, msk1, ha1, hs1, d0, d1, d2, d3;
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
    // per code: 0x80 if its code is 8..15, else 0
    // 0x00008000: byte 0 = 0x00, byte 1 = 0x80: the PRMT turns each 0/1 nibble into a byte mask
    // 0x00000000: zero bytes
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(msk0) : "r"(0x00008000u), "r"(0x00000000u), "r"(top));
    // high bytes of entries (code & 7) for 4 codes
    // 0x3E3C3800: high bytes of e2m1->fp16 entries {0..3}
    // 0x46444240: high bytes of e2m1->fp16 entries {4..7}
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(ha0) : "r"(0x3E3C3800u), "r"(0x46444240u), "r"(sel));
    // codes 8..15 are codes 0..7 negated: flip the sign bit
    // 0x80808080: the sign bit of every byte
    // immLut = 0xF0 ^ (0xCC & 0xAA): d = a ^ (b & c)
    asm("lop3.b32 %0, %1, %2, %3, 0x78;" : "=r"(hs0) : "r"(ha0), "r"(msk0), "r"(0x80808080u));
    // selectors of codes 4..7 into the low 16 bits (PRMT reads only those)
    // shift by 16
    asm("shr.u32 %0, %1, 16;" : "=r"(sel1) : "r"(sel));
    // bit 3 of codes 4..7 into the low 16 bits
    // shift by 16
    asm("shr.u32 %0, %1, 16;" : "=r"(top1) : "r"(top));
    // per code: 0x80 if its code is 8..15, else 0
    // 0x00008000: byte 0 = 0x00, byte 1 = 0x80: the PRMT turns each 0/1 nibble into a byte mask
    // 0x00000000: zero bytes
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(msk1) : "r"(0x00008000u), "r"(0x00000000u), "r"(top1));
    // high bytes of entries (code & 7) for 4 codes
    // 0x3E3C3800: high bytes of e2m1->fp16 entries {0..3}
    // 0x46444240: high bytes of e2m1->fp16 entries {4..7}
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(ha1) : "r"(0x3E3C3800u), "r"(0x46444240u), "r"(sel1));
    // codes 8..15 are codes 0..7 negated: flip the sign bit
    // 0x80808080: the sign bit of every byte
    // immLut = 0xF0 ^ (0xCC & 0xAA): d = a ^ (b & c)
    asm("lop3.b32 %0, %1, %2, %3, 0x78;" : "=r"(hs1) : "r"(ha1), "r"(msk1), "r"(0x80808080u));
    // fp16x2 pair: high bytes from the lookup, low bytes zero (every entry's low byte is 0)
    // 0x00000000: zero bytes
    // byte moves [4, 0, 4, 1]
    asm("prmt.b32 %0, %1, %2, 0x1404;" : "=r"(d0) : "r"(hs0), "r"(0x00000000u));
    // fp16x2 pair: high bytes from the lookup, low bytes zero (every entry's low byte is 0)
    // 0x00000000: zero bytes
    // byte moves [4, 2, 4, 3]
    asm("prmt.b32 %0, %1, %2, 0x3424;" : "=r"(d1) : "r"(hs0), "r"(0x00000000u));
    // fp16x2 pair: high bytes from the lookup, low bytes zero (every entry's low byte is 0)
    // 0x00000000: zero bytes
    // byte moves [4, 0, 4, 1]
    asm("prmt.b32 %0, %1, %2, 0x1404;" : "=r"(d2) : "r"(hs1), "r"(0x00000000u));
    // fp16x2 pair: high bytes from the lookup, low bytes zero (every entry's low byte is 0)
    // 0x00000000: zero bytes
    // byte moves [4, 2, 4, 3]
    asm("prmt.b32 %0, %1, %2, 0x3424;" : "=r"(d3) : "r"(hs1), "r"(0x00000000u));
    d[0] = d0;
    d[1] = d1;
    d[2] = d2;
    d[3] = d3;
}

// convert, then scale: s holds the kScaleRegs registers prepare_scales filled for this block's scale.
__device__ __forceinline__ void dequant(unsigned w, const unsigned* s, unsigned* out) {
    unsigned d[kPairs];
    convert(w, d);
    const unsigned d0 = d[0];
    const unsigned d1 = d[1];
    const unsigned d2 = d[2];
    const unsigned d3 = d[3];
    const unsigned scale = s[0];
    unsigned el0, eh0, gl0, gh0, out0, el1, eh1, gl1, gh1, out1, el2, eh2, gl2, gh2, out2, el3, eh3, gl3, gh3, out3;
    // low element to fp32, exact
    // the low half
    el0 = __float_as_uint([&] { float r_; asm("{ .reg .b16 lo_, hi_; mov.b32 {lo_, hi_}, %1; cvt.f32.f16 %0, lo_; }" : "=f"(r_) : "r"(d0)); return r_; }());
    // high element to fp32, exact
    // the high half
    eh0 = __float_as_uint([&] { float r_; asm("{ .reg .b16 lo_, hi_; mov.b32 {lo_, hi_}, %1; cvt.f32.f16 %0, hi_; }" : "=f"(r_) : "r"(d0)); return r_; }());
    // times 2^(E-127): exact in fp32
    gl0 = __float_as_uint([&] { float r_; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r_) : "f"(__uint_as_float(el0)), "f"(__uint_as_float(scale))); return r_; }());
    // times 2^(E-127): exact in fp32
    gh0 = __float_as_uint([&] { float r_; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r_) : "f"(__uint_as_float(eh0)), "f"(__uint_as_float(scale))); return r_; }());
    // one rounding to nearest-even bf16
    asm("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(out0) : "f"(__uint_as_float(gl0)), "f"(__uint_as_float(gh0)));
    // low element to fp32, exact
    // the low half
    el1 = __float_as_uint([&] { float r_; asm("{ .reg .b16 lo_, hi_; mov.b32 {lo_, hi_}, %1; cvt.f32.f16 %0, lo_; }" : "=f"(r_) : "r"(d1)); return r_; }());
    // high element to fp32, exact
    // the high half
    eh1 = __float_as_uint([&] { float r_; asm("{ .reg .b16 lo_, hi_; mov.b32 {lo_, hi_}, %1; cvt.f32.f16 %0, hi_; }" : "=f"(r_) : "r"(d1)); return r_; }());
    // times 2^(E-127): exact in fp32
    gl1 = __float_as_uint([&] { float r_; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r_) : "f"(__uint_as_float(el1)), "f"(__uint_as_float(scale))); return r_; }());
    // times 2^(E-127): exact in fp32
    gh1 = __float_as_uint([&] { float r_; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r_) : "f"(__uint_as_float(eh1)), "f"(__uint_as_float(scale))); return r_; }());
    // one rounding to nearest-even bf16
    asm("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(out1) : "f"(__uint_as_float(gl1)), "f"(__uint_as_float(gh1)));
    // low element to fp32, exact
    // the low half
    el2 = __float_as_uint([&] { float r_; asm("{ .reg .b16 lo_, hi_; mov.b32 {lo_, hi_}, %1; cvt.f32.f16 %0, lo_; }" : "=f"(r_) : "r"(d2)); return r_; }());
    // high element to fp32, exact
    // the high half
    eh2 = __float_as_uint([&] { float r_; asm("{ .reg .b16 lo_, hi_; mov.b32 {lo_, hi_}, %1; cvt.f32.f16 %0, hi_; }" : "=f"(r_) : "r"(d2)); return r_; }());
    // times 2^(E-127): exact in fp32
    gl2 = __float_as_uint([&] { float r_; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r_) : "f"(__uint_as_float(el2)), "f"(__uint_as_float(scale))); return r_; }());
    // times 2^(E-127): exact in fp32
    gh2 = __float_as_uint([&] { float r_; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r_) : "f"(__uint_as_float(eh2)), "f"(__uint_as_float(scale))); return r_; }());
    // one rounding to nearest-even bf16
    asm("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(out2) : "f"(__uint_as_float(gl2)), "f"(__uint_as_float(gh2)));
    // low element to fp32, exact
    // the low half
    el3 = __float_as_uint([&] { float r_; asm("{ .reg .b16 lo_, hi_; mov.b32 {lo_, hi_}, %1; cvt.f32.f16 %0, lo_; }" : "=f"(r_) : "r"(d3)); return r_; }());
    // high element to fp32, exact
    // the high half
    eh3 = __float_as_uint([&] { float r_; asm("{ .reg .b16 lo_, hi_; mov.b32 {lo_, hi_}, %1; cvt.f32.f16 %0, hi_; }" : "=f"(r_) : "r"(d3)); return r_; }());
    // times 2^(E-127): exact in fp32
    gl3 = __float_as_uint([&] { float r_; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r_) : "f"(__uint_as_float(el3)), "f"(__uint_as_float(scale))); return r_; }());
    // times 2^(E-127): exact in fp32
    gh3 = __float_as_uint([&] { float r_; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r_) : "f"(__uint_as_float(eh3)), "f"(__uint_as_float(scale))); return r_; }());
    // one rounding to nearest-even bf16
    asm("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(out3) : "f"(__uint_as_float(gl3)), "f"(__uint_as_float(gh3)));
    out[0] = out0;
    out[1] = out1;
    out[2] = out2;
    out[3] = out3;
}

}  // namespace mxfp4_bf16
}  // namespace dqgen


namespace dqgen {
namespace mxfp4_bf16 {

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
    const unsigned char* scales8 = reinterpret_cast<const unsigned char*>(scales);  // one scale byte per (group, column)
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
        unsigned s[VEC][kScaleRegs];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const long long i = i0 + r;
            if (i >= KW) break;
            const long long g = (i * kPerWord) / group_size;  // block scales: group_size > 0, a multiple of kPerWord
            if (g != g_cur) {  // once per group: the 8 columns' scale bytes, decoded by prepare_scales
                g_cur = g;
                if (full) {
                    const uint2 b = __ldg(reinterpret_cast<const uint2*>(scales8 + g * N + n0));
#pragma unroll
                    for (int j = 0; j < VEC; ++j) prepare_scales(((j < 4 ? b.x : b.y) >> (8 * (j % 4))) & 0xFFu, s[j]);
                } else {
#pragma unroll
                    for (int j = 0; j < VEC; ++j)
                        if (n0 + j < N) prepare_scales((unsigned)__ldg(scales8 + g * N + n0 + j), s[j]);
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

}  // namespace mxfp4_bf16
}  // namespace dqgen

extern "C" __global__ void __launch_bounds__(256) dqgen_mxfp4_bf16_v8_r1(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::mxfp4_bf16::run<8, 1, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_mxfp4_bf16_v8_r2(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::mxfp4_bf16::run<8, 2, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_mxfp4_bf16_v8_r4(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::mxfp4_bf16::run<8, 4, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_mxfp4_bf16_v8_r1_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::mxfp4_bf16::run<8, 1, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_mxfp4_bf16_v8_r2_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::mxfp4_bf16::run<8, 2, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_mxfp4_bf16_v8_r4_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::mxfp4_bf16::run<8, 4, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_mxfp4_bf16_v8_r2_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::mxfp4_bf16::run<8, 2, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_mxfp4_bf16_v8_r4_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::mxfp4_bf16::run<8, 4, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

