// fusejit thread-block clusters (sm_90 and later): a row's statistics shared by the blocks of a
// cluster through distributed shared memory. Pasted only into kernels that declare
// __cluster_dims__ (row-style kernels whose rows are split over a cluster, rowwise.cpp), after
// fj_reduce.cuh, so every other kernel's source stays as it was.
//
// The exchange, per pass (the kernel spells it in kernel IR):
//   thread 0 of each block writes the block's partial to a __shared__ slot;
//   fj_cluster_sync(): the release orders that write before the barrier, the acquire orders
//   the reads after it, at cluster scope;
//   every thread folds the slots of ranks 0, 1, ..., C - 1, in that order (fj_cluster_fold),
//   so every block gets the same bits and the result does not depend on timing.
// A slot is written again only after another cluster barrier (the next pass's, or the slots
// alternate by row), and a block leaves only after a last barrier, so no block reads a slot
// that is being rewritten or whose block has exited.
#if __CUDA_ARCH__ >= 900

// The block's rank in its cluster (0 .. C - 1): which piece of the row it holds, and the rank
// mapa maps to.
__device__ __forceinline__ unsigned fj_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// The cluster's index in the grid and the number of clusters (1-D grids): the grid-stride loop
// over rows runs per cluster, the same rows in every block of it.
__device__ __forceinline__ unsigned fj_cluster_id() {
  unsigned r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned fj_cluster_count() {
  unsigned r;
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return r;
}

// A barrier over every thread of the cluster. Every thread of every block must reach it, with
// the warp converged (.aligned).
__device__ __forceinline__ void fj_cluster_sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n\t"
      "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The value at `p` (a __shared__ variable of this kernel) in the block of rank `rank`, read in
// 32-bit words (float, or the pair of an online softmax).
template <class T>
__device__ __forceinline__ T fj_cluster_load(const T* p, unsigned rank) {
  static_assert(sizeof(T) % 4 == 0, "cluster exchange values are made of 32-bit words");
  const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  T v;
  unsigned* words = reinterpret_cast<unsigned*>(&v);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) {
    asm volatile("ld.shared::cluster.u32 %0, [%1];"
                 : "=r"(words[i])
                 : "r"(remote + 4u * static_cast<unsigned>(i))
                 : "memory");
  }
  return v;
}

// op(...op(op(slot@0, slot@1), slot@2)..., slot@(kBlocks - 1)): the fold of the cluster's
// partials in rank order. Call it after the fj_cluster_sync that follows the slot's write.
template <int kBlocks, class Op, class T>
__device__ __forceinline__ T fj_cluster_fold(const T* slot, Op op) {
  T r = fj_cluster_load(slot, 0u);
#pragma unroll
  for (int q = 1; q < kBlocks; ++q) r = op(r, fj_cluster_load(slot, static_cast<unsigned>(q)));
  return r;
}

#else
#error "fusejit: this kernel splits rows over thread-block clusters, which need sm_90 or later"
#endif
