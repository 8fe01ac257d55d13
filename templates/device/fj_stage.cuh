// fusejit device staging: rows copied into shared memory one row ahead
// (templates/schedulers/rowwise.cpp, RowConfig::staged), and the skinny GEMM's A and weights' ring
// (templates/schedulers/gemv.cpp); pasted only into kernels that stage.

// N elements copied from global to shared memory without passing through registers (cp.async,
// sm_80 on). The copy lands later; fj_stage_wait() waits for every copy this thread has issued. A thread reads back
// only the slots it copied itself, so no barrier is needed. Same alignment as fj_load_vec.
template <class T, int N>
__device__ __forceinline__ void fj_stage_vec(T* dst, const T* __restrict__ src) {
  constexpr int kTotal = N * static_cast<int>(sizeof(T));
  static_assert(kTotal == 4 || kTotal == 8 || kTotal == 16, "cp.async moves 4, 8 or 16 bytes");
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if (kTotal == 16) {  // (.cg: through L2 only; the row is read once)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(d), "l"(src), "n"(kTotal)
                 : "memory");
  }
}
__device__ __forceinline__ void fj_stage_wait() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// The copies this thread issued since the last commit, as one group; fj_stage_wait_group<N>()
// waits until at most the N groups committed last are still in flight (cp.async.wait_group).
__device__ __forceinline__ void fj_stage_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void fj_stage_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
