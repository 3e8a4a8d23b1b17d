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
