// dqgen device converter for spec "int2_bf16" (s2 -> bf16), generated from its Plan.
// Do not edit: `dqgen build specs/int2_bf16.yaml` regenerates it.
//
// Input word: 16 codes of 2 bits; field j holds element order[j], order = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15].
// value = bf16( q * s ), rounded once to nearest-even.
// Plan: lanes; 25/2 conversion ops per 8 outputs.
// Proof: every code at every lane and 10^6 random words, bit-exact (CPU emulation of these PTX ops).
// Zero points: none.
// Requires sm_80 or newer. Outputs are bf16x2 registers in natural element order:
// out[i] holds elements 2i (low half) and 2i+1 (high half).
#pragma once

namespace dqgen {
namespace int2_bf16 {

[[maybe_unused]] constexpr int kBits = 2;
[[maybe_unused]] constexpr int kPerWord = 16;
[[maybe_unused]] constexpr int kPairs = 8;
[[maybe_unused]] constexpr int kZeroRegs = 0;

// The conversion: one packed word -> 8 bf16x2 registers holding the exact integers q.
__device__ __forceinline__ void convert(unsigned w, unsigned* d) {
    unsigned w_s2, p0, x0, d0, p1, x1, d1, p2, x2, d2, p3, x3, d3, p4, x4, d4, p5, x5, d5, p6, x6, d6, p7, x7, d7;
    // bring fields 2 bits down, to where a mask can reach them
    // shift by 2
    asm("shr.u32 %0, %1, 2;" : "=r"(w_s2) : "r"(w));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 4, 4] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w_s2)
    asm("prmt.b32 %0, %1, %2, 0x4400;" : "=r"(p0) : "r"(w), "r"(w_s2));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x00030003: mask: the 2-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43024302: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1; XOR-ing the code's top bit (0x2 per half) turns two's complement into offset binary, i.e. adds 2^(bits-1)
    // immLut = (0xF0 & 0xCC) ^ 0xAA: d = (a & b) ^ c
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(x0) : "r"(p0), "r"(0x00030003u), "r"(0x43024302u));
    // (128 + field) - 130 = code value, exact
    // 0x3F803F80: 1.0 in both halves (sub.rn.bf16x2 needs sm_90; fma(x, 1, -c) is the same rounding)
    // 0xC302C302: minus 128 (magic) + 2 (offset) in both halves
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d0) : "r"(x0), "r"(0x3F803F80u), "r"(0xC302C302u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [0, 0, 4, 4] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w_s2)
    asm("prmt.b32 %0, %1, %2, 0x4400;" : "=r"(p1) : "r"(w), "r"(w_s2));
    // 128 + field*2^p in each half (p = 4, 4)
    // 0x00300030: mask: the 2-bit fields at bit 4 of the low half and bit 4 of the high half
    // 0x43204320: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1; XOR-ing the code's top bit (0x20 per half) turns two's complement into offset binary, i.e. adds 2^(bits-1)
    // immLut = (0xF0 & 0xCC) ^ 0xAA: d = (a & b) ^ c
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(x1) : "r"(p1), "r"(0x00300030u), "r"(0x43204320u));
    // (128 + field*2^p)/2^p - (128/2^p + 2) = code value, exact
    // 0x3D803D80: {1/16, 1/16}: undo the field's position 2^p in each half
    // 0xC120C120: -(128/2^p + 2) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d1) : "r"(x1), "r"(0x3D803D80u), "r"(0xC120C120u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 5, 5] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w_s2)
    asm("prmt.b32 %0, %1, %2, 0x5511;" : "=r"(p2) : "r"(w), "r"(w_s2));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x00030003: mask: the 2-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43024302: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1; XOR-ing the code's top bit (0x2 per half) turns two's complement into offset binary, i.e. adds 2^(bits-1)
    // immLut = (0xF0 & 0xCC) ^ 0xAA: d = (a & b) ^ c
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(x2) : "r"(p2), "r"(0x00030003u), "r"(0x43024302u));
    // (128 + field) - 130 = code value, exact
    // 0x3F803F80: 1.0 in both halves (sub.rn.bf16x2 needs sm_90; fma(x, 1, -c) is the same rounding)
    // 0xC302C302: minus 128 (magic) + 2 (offset) in both halves
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d2) : "r"(x2), "r"(0x3F803F80u), "r"(0xC302C302u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [1, 1, 5, 5] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w_s2)
    asm("prmt.b32 %0, %1, %2, 0x5511;" : "=r"(p3) : "r"(w), "r"(w_s2));
    // 128 + field*2^p in each half (p = 4, 4)
    // 0x00300030: mask: the 2-bit fields at bit 4 of the low half and bit 4 of the high half
    // 0x43204320: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1; XOR-ing the code's top bit (0x20 per half) turns two's complement into offset binary, i.e. adds 2^(bits-1)
    // immLut = (0xF0 & 0xCC) ^ 0xAA: d = (a & b) ^ c
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(x3) : "r"(p3), "r"(0x00300030u), "r"(0x43204320u));
    // (128 + field*2^p)/2^p - (128/2^p + 2) = code value, exact
    // 0x3D803D80: {1/16, 1/16}: undo the field's position 2^p in each half
    // 0xC120C120: -(128/2^p + 2) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d3) : "r"(x3), "r"(0x3D803D80u), "r"(0xC120C120u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [2, 2, 6, 6] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w_s2)
    asm("prmt.b32 %0, %1, %2, 0x6622;" : "=r"(p4) : "r"(w), "r"(w_s2));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x00030003: mask: the 2-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43024302: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1; XOR-ing the code's top bit (0x2 per half) turns two's complement into offset binary, i.e. adds 2^(bits-1)
    // immLut = (0xF0 & 0xCC) ^ 0xAA: d = (a & b) ^ c
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(x4) : "r"(p4), "r"(0x00030003u), "r"(0x43024302u));
    // (128 + field) - 130 = code value, exact
    // 0x3F803F80: 1.0 in both halves (sub.rn.bf16x2 needs sm_90; fma(x, 1, -c) is the same rounding)
    // 0xC302C302: minus 128 (magic) + 2 (offset) in both halves
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d4) : "r"(x4), "r"(0x3F803F80u), "r"(0xC302C302u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [2, 2, 6, 6] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w_s2)
    asm("prmt.b32 %0, %1, %2, 0x6622;" : "=r"(p5) : "r"(w), "r"(w_s2));
    // 128 + field*2^p in each half (p = 4, 4)
    // 0x00300030: mask: the 2-bit fields at bit 4 of the low half and bit 4 of the high half
    // 0x43204320: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1; XOR-ing the code's top bit (0x20 per half) turns two's complement into offset binary, i.e. adds 2^(bits-1)
    // immLut = (0xF0 & 0xCC) ^ 0xAA: d = (a & b) ^ c
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(x5) : "r"(p5), "r"(0x00300030u), "r"(0x43204320u));
    // (128 + field*2^p)/2^p - (128/2^p + 2) = code value, exact
    // 0x3D803D80: {1/16, 1/16}: undo the field's position 2^p in each half
    // 0xC120C120: -(128/2^p + 2) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d5) : "r"(x5), "r"(0x3D803D80u), "r"(0xC120C120u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [3, 3, 7, 7] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w_s2)
    asm("prmt.b32 %0, %1, %2, 0x7733;" : "=r"(p6) : "r"(w), "r"(w_s2));
    // 128 + field*2^p in each half (p = 0, 0)
    // 0x00030003: mask: the 2-bit fields at bit 0 of the low half and bit 0 of the high half
    // 0x43024302: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1; XOR-ing the code's top bit (0x2 per half) turns two's complement into offset binary, i.e. adds 2^(bits-1)
    // immLut = (0xF0 & 0xCC) ^ 0xAA: d = (a & b) ^ c
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(x6) : "r"(p6), "r"(0x00030003u), "r"(0x43024302u));
    // (128 + field) - 130 = code value, exact
    // 0x3F803F80: 1.0 in both halves (sub.rn.bf16x2 needs sm_90; fma(x, 1, -c) is the same rounding)
    // 0xC302C302: minus 128 (magic) + 2 (offset) in both halves
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d6) : "r"(x6), "r"(0x3F803F80u), "r"(0xC302C302u));
    // put the low element's byte in the low half and the high element's in the high half
    // byte moves [3, 3, 7, 7] (result byte k <- source byte picks[k]; 0-3 = w, 4-7 = w_s2)
    asm("prmt.b32 %0, %1, %2, 0x7733;" : "=r"(p7) : "r"(w), "r"(w_s2));
    // 128 + field*2^p in each half (p = 4, 4)
    // 0x00300030: mask: the 2-bit fields at bit 4 of the low half and bit 4 of the high half
    // 0x43204320: magic bf16x2 {128, 128}: exponent field 134 = 127+7 makes the mantissa unit 1; XOR-ing the code's top bit (0x20 per half) turns two's complement into offset binary, i.e. adds 2^(bits-1)
    // immLut = (0xF0 & 0xCC) ^ 0xAA: d = (a & b) ^ c
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(x7) : "r"(p7), "r"(0x00300030u), "r"(0x43204320u));
    // (128 + field*2^p)/2^p - (128/2^p + 2) = code value, exact
    // 0x3D803D80: {1/16, 1/16}: undo the field's position 2^p in each half
    // 0xC120C120: -(128/2^p + 2) per half: the magic after the 1/2^p scaling, plus the offset
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d7) : "r"(x7), "r"(0x3D803D80u), "r"(0xC120C120u));
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

}  // namespace int2_bf16
}  // namespace dqgen
