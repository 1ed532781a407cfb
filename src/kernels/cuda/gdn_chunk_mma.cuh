// Warp-level tensor-core helpers for the chunked Gated DeltaNet kernels (gdn_chunk_tc.cu): mma.sync
// m16n8k16 with BF16 inputs and fp32 accumulation, its operand fragments from shared memory, cp.async, and
// the hi/lo BF16 split that lets an fp32 operand go through a BF16 tensor core at ~2^-17 relative error.
// Everything here is sm_80 PTX (no wgmma / TMA), so the CI build for sm_80 compiles it unguarded.
//
// Fragment layout of m16n8k16 (g = lane / 4, c = 2 * (lane % 4)):
//   A [16 x 16] row-major: a0 = A[g][c..c+1], a1 = A[g+8][c..c+1], a2 = A[g][c+8..c+9], a3 = A[g+8][c+8..c+9]
//   B [16 x 8]:            b0 = B[c..c+1][g], b1 = B[c+8..c+9][g]
//   C [16 x 8] fp32:       c0 = C[g][c], c1 = C[g][c+1], c2 = C[g+8][c], c3 = C[g+8][c+1]
// so a B operand stored transposed ([n][k], k contiguous) is read like an A operand (ldmatrix, no .trans).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace grimoire::cuda::gdn {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared through L2 only; with !valid the destination is zero-filled and src not read.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// All but the most recently committed group have landed.
__device__ __forceinline__ void cp_async_wait_all_but_last() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// Four floats from 16-byte-aligned shared memory in one instruction (nvcc split a float4 dereference inside
// the fully unrolled triangular solve into four scalar loads).
__device__ __forceinline__ float4 lds_f4(const float* p) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(smem_addr(p)));
    return v;
}

// A fragment of the 16x16 tile at (r0, k0) of a row-major [m][k] bf16 array with row stride ld (rows 16-byte
// aligned): one ldmatrix of the 8x8 blocks (r0, k0), (r0 + 8, k0), (r0, k0 + 8), (r0 + 8, k0 + 8).
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const bf16* s, int ld, int r0, int k0, int lane) {
    const int blk = lane >> 3;
    ldsm_x4(a, s + (r0 + ((blk & 1) << 3) + (lane & 7)) * ld + k0 + ((blk >> 1) << 3));
}

// B fragments of the two 16x8 tiles at (k0, n0) and (k0, n0 + 8) of B, read from its transpose stored [n][k]
// with row stride ld: b[t] belongs to n tile n0 + 8t. One ldmatrix of the blocks (n0, k0), (n0, k0 + 8),
// (n0 + 8, k0), (n0 + 8, k0 + 8).
__device__ __forceinline__ void frag_b2(uint32_t (&b)[2][2], const bf16* s, int ld, int n0, int k0, int lane) {
    const int blk = lane >> 3;
    uint32_t r[4];
    ldsm_x4(r, s + (n0 + ((blk >> 1) << 3) + (lane & 7)) * ld + k0 + ((blk & 1) << 3));
    b[0][0] = r[0];
    b[0][1] = r[1];
    b[1][0] = r[2];
    b[1][1] = r[3];
}

// A fragment of the 16x16 tile at (m0, k0) of X^T, where X is stored row-major [k][m] (row stride ld, rows
// 16-byte aligned): ldmatrix.trans of the four 8x8 blocks X[k0 + 8i.., m0 + 8j..] in the order a0..a3 needs.
__device__ __forceinline__ void frag_a_trans(uint32_t (&a)[4], const bf16* s, int ld, int m0, int k0, int lane) {
    const int blk = lane >> 3, r = lane & 7;
    const bf16* p = s + (k0 + r + ((blk >> 1) << 3)) * ld + m0 + ((blk & 1) << 3);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(smem_addr(p)));
}

// c [16x8] f32 += a [16x16] bf16 * b [16x8] bf16.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// c += a (bh + bl): an exact BF16 operand against a split fp32 one.
__device__ __forceinline__ void mma2(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&bh)[2],
                                     const uint32_t (&bl)[2]) {
    mma(c, a, bh);
    mma(c, a, bl);
}
// c += (ah + al)(bh + bl) without the al bl term (2^-18 relative): two split fp32 operands.
__device__ __forceinline__ void mma3(float (&c)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                     const uint32_t (&bh)[2], const uint32_t (&bl)[2]) {
    mma(c, ah, bh);
    mma(c, ah, bl);
    mma(c, al, bh);
}

// x = hi + lo + O(2^-17 |x|): hi is x rounded to BF16, lo the rounded residual. A product summed over
// hi and lo parts is as exact as fp32 needs here, at two (or three) tensor-core passes instead of one.
__device__ __forceinline__ void split_bf16(float x, bf16& hi, bf16& lo) {
    hi = __float2bfloat16(x);
    lo = __float2bfloat16(x - __bfloat162float(hi));
}

}  // namespace grimoire::cuda::gdn
