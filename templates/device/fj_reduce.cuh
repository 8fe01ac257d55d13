// fusejit device reductions: the combining functions of sum, max and min, and their warp and
// block reductions. Pasted into reduction and normalization kernels.
//
// Every reduction here is a fixed tree, so a kernel's result does not depend on timing.

struct fj_op_sum {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return fj_add(a, b); }
};
// max and min reductions propagate NaN. For floats from sm_80 on that is one `max.NaN` /
// `min.NaN` instruction instead of a chain of compares; which zero wins between +0 and -0 is
// then the hardware's (the order of a reduction tree is not the reference's either).
struct fj_op_max {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return fj_maximum(a, b); }
#if __CUDA_ARCH__ >= 800
  __device__ __forceinline__ float operator()(float a, float b) const {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
  }
#endif
};
struct fj_op_min {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return fj_minimum(a, b); }
#if __CUDA_ARCH__ >= 800
  __device__ __forceinline__ float operator()(float a, float b) const {
    float r;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
  }
#endif
};

__device__ __forceinline__ float fj_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ int fj_shfl_xor(int v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ long long fj_shfl_xor(long long v, int m) {
  return __shfl_xor_sync(0xffffffffu, v, m);
}
__device__ __forceinline__ bool fj_shfl_xor(bool v, int m) {
  return __shfl_xor_sync(0xffffffffu, static_cast<int>(v), m) != 0;
}

// Butterfly over lanes whose ids differ in the bits kFirst..kLast-1 (powers of two): with
// kFirst = 1 and kLast = G it reduces aligned groups of G lanes, and every lane of a group
// gets the group's result. All 32 lanes of the warp must call it.
template <int kFirst, int kLast, class Op, class T>
__device__ __forceinline__ T fj_warp_reduce(T v, Op op) {
#pragma unroll
  for (int m = kLast / 2; m >= kFirst; m >>= 1) v = op(v, fj_shfl_xor(v, m));
  return v;
}

// Reduces over a 1-D block of kThreads threads (a power of two, 64 to 1024); every thread gets
// the result. Every thread of the block must call it. Each warp reduces its lanes, the warp
// totals go through shared memory, and every warp then reduces those totals itself, which
// saves a broadcast step. The second barrier lets the next call reuse the scratch.
template <int kThreads, class Op, class T>
__device__ __forceinline__ T fj_block_reduce(T v, Op op) {
  constexpr int kWarps = kThreads / 32;
  __shared__ T scratch[kWarps];
  v = fj_warp_reduce<1, 32>(v, op);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = scratch[threadIdx.x & (kWarps - 1)];
  v = fj_warp_reduce<1, kWarps>(v, op);
  __syncthreads();
  return v;
}

// ---- online softmax statistics ------------------------------------------------------------
// (m, s): the maximum of the values seen and the sum of e^(x - m) over them. Softmax,
// log-softmax and logsumexp need both; accumulating them together reads the row once instead
// of twice. A value x joins as (x, 1); two partial results combine by rescaling each sum to the
// larger maximum, so any tree of combinations gives sum(e^(x - max)) up to rounding.
struct fj_max_sum {
  float m, s;
};
__device__ __forceinline__ fj_max_sum fj_shfl_xor(fj_max_sum v, int lane_mask) {
  return {fj_shfl_xor(v.m, lane_mask), fj_shfl_xor(v.s, lane_mask)};
}
// e^(a - b) for a <= b; equal values (two -inf included) give 1, so that an empty or all -inf
// prefix rescales cleanly once a finite maximum arrives.
template <bool kFast>
__device__ __forceinline__ float fj_exp_as(float x) { return kFast ? __expf(x) : expf(x); }
template <bool kFast>
__device__ __forceinline__ float fj_exp_below(float a, float b) {
  return a == b ? 1.0f : fj_exp_as<kFast>(a - b);
}
template <bool kFast>
struct fj_op_max_sum {
  __device__ __forceinline__ fj_max_sum operator()(fj_max_sum a, fj_max_sum b) const {
    const float m = fj_op_max()(a.m, b.m);
    return {m, a.s * fj_exp_below<kFast>(a.m, m) + b.s * fj_exp_below<kFast>(b.m, m)};
  }
  // One value joining: a single exponential, e^-|x - m|, either rescales the sum (x is the
  // new maximum) or weighs x (it is not).
  __device__ __forceinline__ fj_max_sum operator()(fj_max_sum a, float x) const {
    const float e = a.m == x ? 1.0f : fj_exp_as<kFast>(-fabsf(x - a.m));
    return x > a.m ? fj_max_sum{x, a.s * e + 1.0f} : fj_max_sum{fj_op_max()(a.m, x), a.s + e};
  }
};
// A pair published to module-scope scratch by a split reduction, read back field by field with
// volatile loads (from L2, never a stale L1 line), as the split fold reads every partial.
__device__ __forceinline__ fj_max_sum fj_volatile_load(const fj_max_sum* p) {
  const volatile fj_max_sum* v = p;
  return {v->m, v->s};
}
// The sum of e^(x - max): NaN when the maximum is infinite, as e^(inf - inf) makes the
// reference's (the equal-values rule above only serves prefixes of -inf).
__device__ __forceinline__ float fj_max_sum_total(fj_max_sum a) {
  return fabsf(a.m) == __uint_as_float(0x7f800000u) ? __uint_as_float(0x7fffffffu) : a.s;
}
