// fusejit programmatic dependent launch helpers (CodegenOptions::grid_dependency, FUSEJIT_PDL):
// pasted only into kernels generated with it, which the runtime launches with programmatic
// stream serialization, so that their blocks may be scheduled while the grid before them in
// the stream is still finishing.

// Lets the grid after this one in the stream (launched with programmatic stream serialization)
// be scheduled now, while this one runs: its blocks take the SMs' free room and run what comes
// before their own wait, which still returns only when this whole grid has completed and its
// writes are visible. Every generated kernel calls it first.
__device__ __forceinline__ void fj_grid_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Waits until the grid before this one in the stream has completed and its writes are visible.
// A kernel reads and writes no memory before it. A kernel launched without the attribute
// returns from it at once.
__device__ __forceinline__ void fj_grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// A hint that the line holding `p` will be read soon: fetched into L2. L2 is where every SM's
// writes meet, so a line prefetched before the wait above and written by the grid ahead is
// seen as written; nothing is read into registers or L1.
__device__ __forceinline__ void fj_prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
