// fusejit GEMV device helpers: what the skinny-GEMM kernel (templates/schedulers/gemv.cpp) calls
// besides fj_core's conversions and fj_memory's vector moves: the warp exchange of its sums and
// the activations of a GEMM epilogue.
//
// The CPU emulation test defines each of these on the host on its own
// (test/templates/emulate/gemv_shim.h), from what it means, not from this file.

// The value of lane (lane ^ m) of the warp: a butterfly over the lanes, whose every lane ends
// with the same sum (float addition is commutative, so lanes l and l ^ m add the same pair).
__device__ __forceinline__ float fj_gemv_shfl_xor(float v, int m) {
  return __shfl_xor_sync(0xffffffffu, v, m);
}

// max(x, 0), NaN kept (as the reference's relu).
__device__ __forceinline__ float fj_gemv_relu(float x) { return x > 0.0f || x != x ? x : 0.0f; }

// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), cuBLASLt's GELU epilogue.
__device__ __forceinline__ float fj_gemv_gelu_tanh(float x) {
  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}

// A split piece's partial sum from L2, never from a stale L1 line.
__device__ __forceinline__ float fj_gemv_partial(const float* p) {
  return *static_cast<const volatile float*>(p);
}

// The tensor-core variant (2..16 rows of bf16/f16 A): mma.m16n8k16 with f32 accumulators, the
// weights its A (16 weight rows by 16 of K), A's rows its B (16 of K by 8 rows); fragment
// layouts as in fj_attention.cuh. The kernel permutes K within each 32 of it the same way for
// both operands, so that every lane loads whole 16-byte vectors.
#define FJ_GEMV_MMA(T)                                 \
  asm("mma.sync.aligned.m16n8k16.row.col.f32." T "." T \
      ".f32 {%0, %1, %2, %3}, "                        \
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"  \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
__device__ __forceinline__ void fj_gemv_mma_bf16(float (&d)[4], const unsigned (&a)[4],
                                                 const unsigned (&b)[2]) {
  FJ_GEMV_MMA("bf16");
}
__device__ __forceinline__ void fj_gemv_mma_f16(float (&d)[4], const unsigned (&a)[4],
                                                const unsigned (&b)[2]) {
  FJ_GEMV_MMA("f16");
}
#undef FJ_GEMV_MMA

// a - b of two f16 pairs, each half rounded to nearest (fj_gemv_i8.cuh's exact widening).
__device__ __forceinline__ unsigned fj_gemv_f16x2_sub(unsigned a, unsigned b) {
  unsigned r;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// Two 16-bit elements as one register, `lo` in the low half.
__device__ __forceinline__ unsigned fj_gemv_join(unsigned short lo, unsigned short hi) {
  return static_cast<unsigned>(lo) | (static_cast<unsigned>(hi) << 16);
}
