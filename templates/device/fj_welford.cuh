// fusejit device one-pass mean and variance: pasted, after fj_reduce.cuh, only into row
// kernels that accumulate a mean/variance pair together (fusion/welford.h), so every other
// kernel's source stays as it was.
//
// (n, m, m2): the count of the values seen, their mean, and M2, the sum of their squared
// deviations from that mean. Layer norm and var need the mean and M2 (fusion/welford.h);
// accumulating them together saves the variance's reduction after the mean's. A value joins
// by Welford's update; two partials combine by Chan's: with d = mb - ma and n = na + nb,
// m = ma + d nb / n and M2 = M2a + M2b + d^2 na nb / n. Both stay accurate when the mean is
// large against the spread, which the sum of squares minus the squared sum does not. The count
// is a float (exact to 2^24, and only a weight beyond). An empty partial (n = 0) leaves the
// other one as it is, bit for bit (for finite values). Divisions are the hardware's approximate ones (__fdividef,
// within 2 ulp for the normal divisors counts are): a weight or a mean off by an ulp changes
// nothing that matters, and a correctly rounded division's slow path is a call that makes a
// kernel holding its row in registers spill.
struct fj_welford {
  float n, m, m2;
};
__device__ __forceinline__ fj_welford fj_shfl_xor(fj_welford v, int lane_mask) {
  return {fj_shfl_xor(v.n, lane_mask), fj_shfl_xor(v.m, lane_mask), fj_shfl_xor(v.m2, lane_mask)};
}
struct fj_op_welford {
  // One value joining.
  __device__ __forceinline__ fj_welford operator()(fj_welford a, float x) const {
    const float n = a.n + 1.0f;
    const float d = x - a.m;
    const float m = a.m + __fdividef(d, n);
    return {n, m, fmaf(d, x - m, a.m2)};
  }
  // Two partials. An empty one (n = 0) has m = 0 and m2 = 0, so that its weight w (0, or 1
  // when the other one is empty) leaves the other one's values exactly, without a branch.
  __device__ __forceinline__ fj_welford operator()(fj_welford a, fj_welford b) const {
    const float n = a.n + b.n;
    const float w = __fdividef(b.n, fmaxf(n, 1.0f));
    const float d = b.m - a.m;
    return {n, fmaf(d, w, a.m), a.m2 + b.m2 + d * d * a.n * w};
  }
};
// The exact statistics of values a thread holds in registers, in two sweeps over them and
// without a division per value: fj_op_count_sum counts and adds them up (the sum in m),
// fj_welford_center turns the sum into the mean, fj_op_deviation adds up the squared
// deviations from it into m2.
struct fj_op_count_sum {
  __device__ __forceinline__ fj_welford operator()(fj_welford a, float x) const {
    return {a.n + 1.0f, a.m + x, a.m2};
  }
};
__device__ __forceinline__ fj_welford fj_welford_center(fj_welford a) {
  return {a.n, a.n > 0.0f ? __fdividef(a.m, a.n) : 0.0f, a.m2};
}
struct fj_op_deviation {
  __device__ __forceinline__ fj_welford operator()(fj_welford a, float x) const {
    const float d = x - a.m;
    return {a.n, a.m, fmaf(d, d, a.m2)};
  }
};
__device__ __forceinline__ fj_welford fj_volatile_load(const fj_welford* p) {
  const volatile fj_welford* v = p;
  return {v->n, v->m, v->m2};
}
