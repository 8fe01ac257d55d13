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
