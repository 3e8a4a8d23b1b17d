// dqgen standalone dequantize kernel for spec "uint3_float_zeros_bf16" (u3 -> bf16), generated.
// Do not edit: `dqgen build specs/uint3_float_zeros_bf16.yaml` regenerates it.
//   qweight [3K/32, N] int32 (packed along K in 3-word blocks of 32 codes: block b = rows 32b..32b+31
//   in words qweight[3b..3b+2, n]), scales [G, N] bf16, zeros [G, N] bf16,
//   out [K, N] bf16 row-major; G = K / group_size (1 when group_size == -1).
// Index arithmetic is 64-bit throughout; any shape the packing allows is handled (tails are guarded).
// Entry points dqgen_uint3_float_zeros_bf16_v<VEC>_r<ROWS>[_u]: each thread converts ROWS rows x VEC words, all of
// its loads issued before any conversion (memory-level parallelism), one scale/zero-point preparation
// per group; "_u" variants make only 4-byte accesses, for base pointers that are not 16-byte aligned.

// dqgen device converter for spec "uint3_float_zeros_bf16" (u3 -> bf16), generated from its Plan.
// Do not edit: `dqgen build specs/uint3_float_zeros_bf16.yaml` regenerates it.
//
// Input block: 3 words (w0, w1, w2, low first) holding 32 codes of 3 bits; code i is bits
// [3i, 3i + 3) of the 96-bit little-endian run (codes that straddle two words included).
// value = bf16( q * s ), rounded once to nearest-even.
// Plan: lanes; 27/2 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: float.
// Requires sm_80 or newer. Outputs are bf16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace uint3_float_zeros_bf16 {

[[maybe_unused]] constexpr int kBits = 3;
[[maybe_unused]] constexpr int kPerWord = 32;
[[maybe_unused]] constexpr int kPairs = 16;
[[maybe_unused]] constexpr int kZeroRegs = 0;
[[maybe_unused]] constexpr int kWords = 3;  // 32-bit words per packing block

// The conversion: one 3-word block -> 16 bf16x2 registers holding the exact code values.
__device__ __forceinline__ void convert(unsigned w0, unsigned w1, unsigned w2, unsigned* d) {
    unsigned w0_s3, p0, x0, d0, p1, x1, d1, p2, x2, d2, p3, x3, d3, p4, x4, d4, v30, v30_s3, p5, x5, d5, p6, x6, d6, p7, x7, d7, p8, x8, d8, p9, x9, d9, v60, v60_s3, p10, x10, d10, p11, x11, d11, p12, x12, d12, p13, x13, d13, p14, x14, d14, v90, p15, x15, d15;
    // bring fields 3 bits down, to where a mask can reach them
    // shift by 3
    asm("shr.u32 %0, %1, 3;" : "=r"(w0_s3) : "r"(w0));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 4, 4] (result byte k <- source byte picks[k]; 0-3 = w0, 4-7 = w0_s3)
    asm("prmt.b32 %0, %1, %2, 0x4400;" : "=r"(p0) : "r"(w0), "r"(w0_s3));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x00070007: mask: the 3-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x0) : "r"(p0), "r"(0x00070007u), "r"(0x43004300u));
    // (128 + field) - 128 = code value, exact
    // 0x3F803F80: 1.0 in both halves (sub.rn.bf16x2 needs sm_90; fma(x, 1, -c) is the same rounding)
    // 0xC300C300: minus 128 (magic) + 0 (offset) in both halves
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d0) : "r"(x0), "r"(0x3F803F80u), "r"(0xC300C300u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 5, 5] (result byte k <- source byte picks[k]; 0-3 = w0_s3, 4-7 = w0)
    asm("prmt.b32 %0, %1, %2, 0x5500;" : "=r"(p1) : "r"(w0_s3), "r"(w0));
    // 128 + field*2^p in each half (p = 3, 1)
    // 0x000E0038: mask: the 3-bit fields at bit 3 of the low half and bit 1 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x1) : "r"(p1), "r"(0x000E0038u), "r"(0x43004300u));
    // (128 + field*2^p)/2^p - (128/2^p + 0) = code value, exact
    // 0x3F003E00: {1/8, 1/2}: undo the field's position 2^p in each half
    // 0xC280C180: -(128/2^p + 0) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d1) : "r"(x1), "r"(0x3F003E00u), "r"(0xC280C180u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 5, 5] (result byte k <- source byte picks[k]; 0-3 = w0, 4-7 = w0_s3)
    asm("prmt.b32 %0, %1, %2, 0x5511;" : "=r"(p2) : "r"(w0), "r"(w0_s3));
    // 128 + field*2^p in each half (p = 4, 4)
    // 0x00700070: mask: the 3-bit fields at bit 4 of the low half and bit 4 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x2) : "r"(p2), "r"(0x00700070u), "r"(0x43004300u));
    // (128 + field*2^p)/2^p - (128/2^p + 0) = code value, exact
    // 0x3D803D80: {1/16, 1/16}: undo the field's position 2^p in each half
    // 0xC100C100: -(128/2^p + 0) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d2) : "r"(x2), "r"(0x3D803D80u), "r"(0xC100C100u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [2, 2, 6, 6] (result byte k <- source byte picks[k]; 0-3 = w0, 4-7 = w0_s3)
    asm("prmt.b32 %0, %1, %2, 0x6622;" : "=r"(p3) : "r"(w0), "r"(w0_s3));
    // 128 + field*2^p in each half (p = 2, 2)
    // 0x001C001C: mask: the 3-bit fields at bit 2 of the low half and bit 2 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x3) : "r"(p3), "r"(0x001C001Cu), "r"(0x43004300u));
    // (128 + field*2^p)/2^p - (128/2^p + 0) = code value, exact
    // 0x3E803E80: {1/4, 1/4}: undo the field's position 2^p in each half
    // 0xC200C200: -(128/2^p + 0) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d3) : "r"(x3), "r"(0x3E803E80u), "r"(0xC200C200u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [3, 3, 7, 7] (result byte k <- source byte picks[k]; 0-3 = w0, 4-7 = w0_s3)
    asm("prmt.b32 %0, %1, %2, 0x7733;" : "=r"(p4) : "r"(w0), "r"(w0_s3));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x00070007: mask: the 3-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x4) : "r"(p4), "r"(0x00070007u), "r"(0x43004300u));
    // (128 + field) - 128 = code value, exact
    // 0x3F803F80: 1.0 in both halves (sub.rn.bf16x2 needs sm_90; fma(x, 1, -c) is the same rounding)
    // 0xC300C300: minus 128 (magic) + 0 (offset) in both halves
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d4) : "r"(x4), "r"(0x3F803F80u), "r"(0xC300C300u));
    // block bits 30..61: codes of pairs 5..9, straddling ones whole
    // funnel shift of (w1:w0) by 30
    asm("shf.r.clamp.b32 %0, %1, %2, 30;" : "=r"(v30) : "r"(w0), "r"(w1));
    // bring fields 3 bits down, to where a mask can reach them
    // shift by 3
    asm("shr.u32 %0, %1, 3;" : "=r"(v30_s3) : "r"(v30));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 4, 4] (result byte k <- source byte picks[k]; 0-3 = v30, 4-7 = v30_s3)
    asm("prmt.b32 %0, %1, %2, 0x4400;" : "=r"(p5) : "r"(v30), "r"(v30_s3));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x00070007: mask: the 3-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x5) : "r"(p5), "r"(0x00070007u), "r"(0x43004300u));
    // (128 + field) - 128 = code value, exact
    // 0x3F803F80: 1.0 in both halves (sub.rn.bf16x2 needs sm_90; fma(x, 1, -c) is the same rounding)
    // 0xC300C300: minus 128 (magic) + 0 (offset) in both halves
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d5) : "r"(x5), "r"(0x3F803F80u), "r"(0xC300C300u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 5, 5] (result byte k <- source byte picks[k]; 0-3 = v30_s3, 4-7 = v30)
    asm("prmt.b32 %0, %1, %2, 0x5500;" : "=r"(p6) : "r"(v30_s3), "r"(v30));
    // 128 + field*2^p in each half (p = 3, 1)
    // 0x000E0038: mask: the 3-bit fields at bit 3 of the low half and bit 1 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x6) : "r"(p6), "r"(0x000E0038u), "r"(0x43004300u));
    // (128 + field*2^p)/2^p - (128/2^p + 0) = code value, exact
    // 0x3F003E00: {1/8, 1/2}: undo the field's position 2^p in each half
    // 0xC280C180: -(128/2^p + 0) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d6) : "r"(x6), "r"(0x3F003E00u), "r"(0xC280C180u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 5, 5] (result byte k <- source byte picks[k]; 0-3 = v30, 4-7 = v30_s3)
    asm("prmt.b32 %0, %1, %2, 0x5511;" : "=r"(p7) : "r"(v30), "r"(v30_s3));
    // 128 + field*2^p in each half (p = 4, 4)
    // 0x00700070: mask: the 3-bit fields at bit 4 of the low half and bit 4 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x7) : "r"(p7), "r"(0x00700070u), "r"(0x43004300u));
    // (128 + field*2^p)/2^p - (128/2^p + 0) = code value, exact
    // 0x3D803D80: {1/16, 1/16}: undo the field's position 2^p in each half
    // 0xC100C100: -(128/2^p + 0) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d7) : "r"(x7), "r"(0x3D803D80u), "r"(0xC100C100u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [2, 2, 6, 6] (result byte k <- source byte picks[k]; 0-3 = v30, 4-7 = v30_s3)
    asm("prmt.b32 %0, %1, %2, 0x6622;" : "=r"(p8) : "r"(v30), "r"(v30_s3));
    // 128 + field*2^p in each half (p = 2, 2)
    // 0x001C001C: mask: the 3-bit fields at bit 2 of the low half and bit 2 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x8) : "r"(p8), "r"(0x001C001Cu), "r"(0x43004300u));
    // (128 + field*2^p)/2^p - (128/2^p + 0) = code value, exact
    // 0x3E803E80: {1/4, 1/4}: undo the field's position 2^p in each half
    // 0xC200C200: -(128/2^p + 0) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d8) : "r"(x8), "r"(0x3E803E80u), "r"(0xC200C200u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [3, 3, 7, 7] (result byte k <- source byte picks[k]; 0-3 = v30, 4-7 = v30_s3)
    asm("prmt.b32 %0, %1, %2, 0x7733;" : "=r"(p9) : "r"(v30), "r"(v30_s3));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x00070007: mask: the 3-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x9) : "r"(p9), "r"(0x00070007u), "r"(0x43004300u));
    // (128 + field) - 128 = code value, exact
    // 0x3F803F80: 1.0 in both halves (sub.rn.bf16x2 needs sm_90; fma(x, 1, -c) is the same rounding)
    // 0xC300C300: minus 128 (magic) + 0 (offset) in both halves
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d9) : "r"(x9), "r"(0x3F803F80u), "r"(0xC300C300u));
    // block bits 60..91: codes of pairs 10..14, straddling ones whole
    // funnel shift of (w2:w1) by 28
    asm("shf.r.clamp.b32 %0, %1, %2, 28;" : "=r"(v60) : "r"(w1), "r"(w2));
    // bring fields 3 bits down, to where a mask can reach them
    // shift by 3
    asm("shr.u32 %0, %1, 3;" : "=r"(v60_s3) : "r"(v60));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 4, 4] (result byte k <- source byte picks[k]; 0-3 = v60, 4-7 = v60_s3)
    asm("prmt.b32 %0, %1, %2, 0x4400;" : "=r"(p10) : "r"(v60), "r"(v60_s3));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x00070007: mask: the 3-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x10) : "r"(p10), "r"(0x00070007u), "r"(0x43004300u));
    // (128 + field) - 128 = code value, exact
    // 0x3F803F80: 1.0 in both halves (sub.rn.bf16x2 needs sm_90; fma(x, 1, -c) is the same rounding)
    // 0xC300C300: minus 128 (magic) + 0 (offset) in both halves
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d10) : "r"(x10), "r"(0x3F803F80u), "r"(0xC300C300u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 5, 5] (result byte k <- source byte picks[k]; 0-3 = v60_s3, 4-7 = v60)
    asm("prmt.b32 %0, %1, %2, 0x5500;" : "=r"(p11) : "r"(v60_s3), "r"(v60));
    // 128 + field*2^p in each half (p = 3, 1)
    // 0x000E0038: mask: the 3-bit fields at bit 3 of the low half and bit 1 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x11) : "r"(p11), "r"(0x000E0038u), "r"(0x43004300u));
    // (128 + field*2^p)/2^p - (128/2^p + 0) = code value, exact
    // 0x3F003E00: {1/8, 1/2}: undo the field's position 2^p in each half
    // 0xC280C180: -(128/2^p + 0) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d11) : "r"(x11), "r"(0x3F003E00u), "r"(0xC280C180u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 5, 5] (result byte k <- source byte picks[k]; 0-3 = v60, 4-7 = v60_s3)
    asm("prmt.b32 %0, %1, %2, 0x5511;" : "=r"(p12) : "r"(v60), "r"(v60_s3));
    // 128 + field*2^p in each half (p = 4, 4)
    // 0x00700070: mask: the 3-bit fields at bit 4 of the low half and bit 4 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x12) : "r"(p12), "r"(0x00700070u), "r"(0x43004300u));
    // (128 + field*2^p)/2^p - (128/2^p + 0) = code value, exact
    // 0x3D803D80: {1/16, 1/16}: undo the field's position 2^p in each half
    // 0xC100C100: -(128/2^p + 0) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d12) : "r"(x12), "r"(0x3D803D80u), "r"(0xC100C100u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [2, 2, 6, 6] (result byte k <- source byte picks[k]; 0-3 = v60, 4-7 = v60_s3)
    asm("prmt.b32 %0, %1, %2, 0x6622;" : "=r"(p13) : "r"(v60), "r"(v60_s3));
    // 128 + field*2^p in each half (p = 2, 2)
    // 0x001C001C: mask: the 3-bit fields at bit 2 of the low half and bit 2 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x13) : "r"(p13), "r"(0x001C001Cu), "r"(0x43004300u));
    // (128 + field*2^p)/2^p - (128/2^p + 0) = code value, exact
    // 0x3E803E80: {1/4, 1/4}: undo the field's position 2^p in each half
    // 0xC200C200: -(128/2^p + 0) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d13) : "r"(x13), "r"(0x3E803E80u), "r"(0xC200C200u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [3, 3, 7, 7] (result byte k <- source byte picks[k]; 0-3 = v60, 4-7 = v60_s3)
    asm("prmt.b32 %0, %1, %2, 0x7733;" : "=r"(p14) : "r"(v60), "r"(v60_s3));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x00070007: mask: the 3-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x14) : "r"(p14), "r"(0x00070007u), "r"(0x43004300u));
    // (128 + field) - 128 = code value, exact
    // 0x3F803F80: 1.0 in both halves (sub.rn.bf16x2 needs sm_90; fma(x, 1, -c) is the same rounding)
    // 0xC300C300: minus 128 (magic) + 0 (offset) in both halves
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d14) : "r"(x14), "r"(0x3F803F80u), "r"(0xC300C300u));
    // block bits 90.. of the last word
    // shift by 26
    asm("shr.u32 %0, %1, 26;" : "=r"(v90) : "r"(w2));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 0, 0] (result byte k <- source byte picks[k]; 0-3 = v90, 4-7 = v90)
    asm("prmt.b32 %0, %1, %2, 0x0;" : "=r"(p15) : "r"(v90), "r"(v90));
    // 128 + field*2^p in each half (p = 0, 3)
    // 0x00380007: mask: the 3-bit fields at bit 0 of the low half and bit 3 of the high half
    // 0x43004300: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1
    // immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(x15) : "r"(p15), "r"(0x00380007u), "r"(0x43004300u));
    // (128 + field*2^p)/2^p - (128/2^p + 0) = code value, exact
    // 0x3E003F80: {1, 1/8}: undo the field's position 2^p in each half
    // 0xC180C300: -(128/2^p + 0) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d15) : "r"(x15), "r"(0x3E003F80u), "r"(0xC180C300u));
    d[0] = d0;
    d[1] = d1;
    d[2] = d2;
    d[3] = d3;
    d[4] = d4;
    d[5] = d5;
    d[6] = d6;
    d[7] = d7;
    d[8] = d8;
    d[9] = d9;
    d[10] = d10;
    d[11] = d11;
    d[12] = d12;
    d[13] = d13;
    d[14] = d14;
    d[15] = d15;
}

// convert, then scale: out[i] = round(round(d[i] - f[i]) * s[i]); s[i] holds the scales of elements 2i, 2i+1,
// f[i] their float zero points.
__device__ __forceinline__ void dequant(unsigned w0, unsigned w1, unsigned w2, const unsigned* s, const unsigned* f, unsigned* out) {
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
    const unsigned d8 = d[8];
    const unsigned d9 = d[9];
    const unsigned d10 = d[10];
    const unsigned d11 = d[11];
    const unsigned d12 = d[12];
    const unsigned d13 = d[13];
    const unsigned d14 = d[14];
    const unsigned d15 = d[15];
    const unsigned s0 = s[0];
    const unsigned f0 = f[0];
    const unsigned s1 = s[1];
    const unsigned f1 = f[1];
    const unsigned s2 = s[2];
    const unsigned f2 = f[2];
    const unsigned s3 = s[3];
    const unsigned f3 = f[3];
    const unsigned s4 = s[4];
    const unsigned f4 = f[4];
    const unsigned s5 = s[5];
    const unsigned f5 = f[5];
    const unsigned s6 = s[6];
    const unsigned f6 = f[6];
    const unsigned s7 = s[7];
    const unsigned f7 = f[7];
    const unsigned s8 = s[8];
    const unsigned f8 = f[8];
    const unsigned s9 = s[9];
    const unsigned f9 = f[9];
    const unsigned s10 = s[10];
    const unsigned f10 = f[10];
    const unsigned s11 = s[11];
    const unsigned f11 = f[11];
    const unsigned s12 = s[12];
    const unsigned f12 = f[12];
    const unsigned s13 = s[13];
    const unsigned f13 = f[13];
    const unsigned s14 = s[14];
    const unsigned f14 = f[14];
    const unsigned s15 = s[15];
    const unsigned f15 = f[15];
    unsigned t0, out0, t1, out1, t2, out2, t3, out3, t4, out4, t5, out5, t6, out6, t7, out7, t8, out8, t9, out9, t10, out10, t11, out11, t12, out12, t13, out13, t14, out14, t15, out15;
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t0) : "r"(f0), "r"(0xBF80BF80u), "r"(d0));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out0) : "r"(t0), "r"(s0), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t1) : "r"(f1), "r"(0xBF80BF80u), "r"(d1));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out1) : "r"(t1), "r"(s1), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t2) : "r"(f2), "r"(0xBF80BF80u), "r"(d2));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out2) : "r"(t2), "r"(s2), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t3) : "r"(f3), "r"(0xBF80BF80u), "r"(d3));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out3) : "r"(t3), "r"(s3), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t4) : "r"(f4), "r"(0xBF80BF80u), "r"(d4));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out4) : "r"(t4), "r"(s4), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t5) : "r"(f5), "r"(0xBF80BF80u), "r"(d5));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out5) : "r"(t5), "r"(s5), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t6) : "r"(f6), "r"(0xBF80BF80u), "r"(d6));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out6) : "r"(t6), "r"(s6), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t7) : "r"(f7), "r"(0xBF80BF80u), "r"(d7));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out7) : "r"(t7), "r"(s7), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t8) : "r"(f8), "r"(0xBF80BF80u), "r"(d8));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out8) : "r"(t8), "r"(s8), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t9) : "r"(f9), "r"(0xBF80BF80u), "r"(d9));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out9) : "r"(t9), "r"(s9), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t10) : "r"(f10), "r"(0xBF80BF80u), "r"(d10));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out10) : "r"(t10), "r"(s10), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t11) : "r"(f11), "r"(0xBF80BF80u), "r"(d11));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out11) : "r"(t11), "r"(s11), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t12) : "r"(f12), "r"(0xBF80BF80u), "r"(d12));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out12) : "r"(t12), "r"(s12), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t13) : "r"(f13), "r"(0xBF80BF80u), "r"(d13));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out13) : "r"(t13), "r"(s13), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t14) : "r"(f14), "r"(0xBF80BF80u), "r"(d14));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out14) : "r"(t14), "r"(s14), "r"(0x80008000u));
    // q - z for a float zero point, rounded to bf16 (the first of two roundings)
    // 0xBF80BF80: -1.0: fma(b, -1, a) = a - b, exact here
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(t15) : "r"(f15), "r"(0xBF80BF80u), "r"(d15));
    // (q - z) * scale, rounded to bf16 (the second rounding) (mul.rn.bf16x2 needs sm_90)
    // 0x80008000: -0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out15) : "r"(t15), "r"(s15), "r"(0x80008000u));
    out[0] = out0;
    out[1] = out1;
    out[2] = out2;
    out[3] = out3;
    out[4] = out4;
    out[5] = out5;
    out[6] = out6;
    out[7] = out7;
    out[8] = out8;
    out[9] = out9;
    out[10] = out10;
    out[11] = out11;
    out[12] = out12;
    out[13] = out13;
    out[14] = out14;
    out[15] = out15;
}

}  // namespace uint3_float_zeros_bf16
}  // namespace dqgen


namespace dqgen {
namespace uint3_float_zeros_bf16 {

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

// Tile: ROWS blocks (3 word-rows each, ROWS * 32 rows of K) x (kBlock * VEC) columns; thread t owns VEC
// adjacent columns (VEC = 4: a block yields 16 output pairs per column, so 4 columns keep them in registers).
// Block i of a column is words 3i..3i+2 (each word-row loaded as one 16-byte vector) and holds rows
// 32i..32i+31; PRMT transposes column pairs so that each output row's 4 values leave in one
// 8-byte store, contiguous across the warp.
[[maybe_unused]] constexpr int kOrder[kPerWord] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
[[maybe_unused]] constexpr int kZeroPos[kPerWord] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};  // field of element n % 32 in a zero word
[[maybe_unused]] constexpr unsigned kFieldMask = 0x7u;

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
        unsigned fz[VEC][kPairs];
        const unsigned short* zeros16 = reinterpret_cast<const unsigned short*>(zeros);
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
                    const unsigned fj = (unsigned)zeros16[g * N + n] * 0x10001u;
#pragma unroll
                    for (int p = 0; p < kPairs; ++p) fz[j][p] = fj;
                }
            }
            unsigned o[VEC][kPairs];
#pragma unroll
            for (int j = 0; j < VEC; ++j) dequant(q[r][0][j], q[r][1][j], q[r][2][j], s[j], fz[j], o[j]);
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

}  // namespace uint3_float_zeros_bf16
}  // namespace dqgen

extern "C" __global__ void __launch_bounds__(256) dqgen_uint3_float_zeros_bf16_v4_r1(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::uint3_float_zeros_bf16::run<4, 1, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_uint3_float_zeros_bf16_v4_r2(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::uint3_float_zeros_bf16::run<4, 2, true, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_uint3_float_zeros_bf16_v4_r1_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::uint3_float_zeros_bf16::run<4, 1, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_uint3_float_zeros_bf16_v4_r2_u(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::uint3_float_zeros_bf16::run<4, 2, false, false>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_uint3_float_zeros_bf16_v4_r1_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::uint3_float_zeros_bf16::run<4, 1, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

extern "C" __global__ void __launch_bounds__(256) dqgen_uint3_float_zeros_bf16_v4_r2_cs(
    const unsigned* __restrict__ qweight, const unsigned* __restrict__ scales, const unsigned* __restrict__ zeros,
    const int* __restrict__ g_idx, unsigned* __restrict__ out, long long rows, long long cols, long long group_size) {
    dqgen::uint3_float_zeros_bf16::run<4, 2, true, true>(qweight, scales, zeros, g_idx, out, rows, cols, group_size);
}

