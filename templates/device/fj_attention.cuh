// fusejit attention device helpers: the warp-level tensor-core product and the few moves the
// attention kernel (templates/schedulers/attention.cpp) makes besides fj_core's conversions.
//
// The kernel proper calls nothing else from the device side (and threadIdx, blockIdx, gridDim,
// __syncthreads, __uint_as_float, fmaxf): the CPU emulation test defines each of these on the
// host on its own (test/templates/emulate/cuda_shim.h), so that it checks the kernel's use of
// the fragment layouts against the PTX ISA rather than against this file.

// D += A B on one m16n8k16 tile: A 16x16 row-major, B 16x8 column-major, f32 accumulators.
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
// with g = lane / 4 and t = lane % 4; each 32-bit register holds two 16-bit elements, the
// lower-indexed one in its low half:
//   A (row, col):  a[0] = (g, 2t..2t+1)   a[1] = (g+8, 2t..2t+1)
//                  a[2] = (g, 2t+8..2t+9) a[3] = (g+8, 2t+8..2t+9)
//   B (k, n):      b[0] = (2t..2t+1, g)   b[1] = (2t+8..2t+9, g)
//   C, D (row, col): d[0], d[1] = (g, 2t), (g, 2t+1)   d[2], d[3] = (g+8, 2t), (g+8, 2t+1)
// One asm statement per input type (the type is part of the instruction's name).
#define FJ_ATT_MMA(T)                                                                   \
  asm("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0, %1, %2, %3}, "       \
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                                   \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                  \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
__device__ __forceinline__ void fj_att_mma_bf16(float (&d)[4], const unsigned (&a)[4],
                                                const unsigned (&b)[2]) {
  FJ_ATT_MMA("bf16");
}
__device__ __forceinline__ void fj_att_mma_f16(float (&d)[4], const unsigned (&a)[4],
                                               const unsigned (&b)[2]) {
  FJ_ATT_MMA("f16");
}
#undef FJ_ATT_MMA

// Two f32 values rounded (to nearest even) into one register of the I/O type, `lo` in the low
// half: the A fragments of P and the stored output.
__device__ __forceinline__ unsigned fj_att_pack_bf16(float lo, float hi) {
  return fj_f32x2_to_bf16x2(lo, hi);
}
__device__ __forceinline__ unsigned fj_att_pack_f16(float lo, float hi) {
  return fj_f32x2_to_f16x2(lo, hi);
}

// An additive mask element as f32.
__device__ __forceinline__ float fj_att_widen_bf16(unsigned short x) { return fj_bf16_to_f32(x); }
__device__ __forceinline__ float fj_att_widen_f16(unsigned short x) { return fj_f16_to_f32(x); }
__device__ __forceinline__ float fj_att_widen_f32(float x) { return x; }

// 2^x with the hardware ex2 (relative error about 2^-22; 2^-inf = +0, which masked scores
// rely on).
__device__ __forceinline__ float fj_att_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The value of lane (lane ^ m) of the warp: rows of an accumulator fragment are spread over the
// four lanes of a quad, which combine with m = 1 and m = 2.
__device__ __forceinline__ float fj_att_shfl_xor(float v, int m) {
  return __shfl_xor_sync(0xffffffffu, v, m);
}

// Two consecutive 16-bit elements as one register, `p` 4-byte aligned.
__device__ __forceinline__ unsigned fj_att_load2(const unsigned short* p) {
  return *reinterpret_cast<const unsigned*>(p);
}
__device__ __forceinline__ void fj_att_store2(unsigned short* p, unsigned x) {
  *reinterpret_cast<unsigned*>(p) = x;
}
// Four 8x8 matrices of 16-bit elements from shared memory (ldmatrix .m8n8.x4): lane l gives the
// address of row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned), and register r[m] receives
// lane l's part of matrix m: (row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1), low half first;
// with .trans, of the transposed matrix: (rows 2 (l % 4) and 2 (l % 4) + 1, column l / 4). A
// row-major 8x8 piece of K (keys x features) so gives a B fragment of S = Q Kᵀ, and with .trans
// a row-major piece of V (keys x features) one of O = P V.
__device__ __forceinline__ void fj_att_ldmatrix_x4(unsigned (&r)[4], const unsigned short* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void fj_att_ldmatrix_x4_trans(unsigned (&r)[4], const unsigned short* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// 16 bytes from global to shared memory without a register round trip (cp.async, sm_80 on):
// `bytes` (16, or 0 for a row past the end) are read and the rest of the 16 zero-filled. The
// copies of a thread land in commit groups: fj_att_async_wait<N>() returns once all but its N
// most recent groups have landed (its own copies only: a __syncthreads after it publishes them).
__device__ __forceinline__ void fj_att_copy16_async(unsigned short* dst, const unsigned short* src,
                                                    int bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void fj_att_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void fj_att_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Two 16-bit elements from anywhere as one register, `lo` in the low half.
__device__ __forceinline__ unsigned fj_att_join(unsigned short lo, unsigned short hi) {
  return static_cast<unsigned>(lo) | (static_cast<unsigned>(hi) << 16);
}
