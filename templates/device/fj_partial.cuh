// fusejit device reads of a split kernel's partials: pasted, after fj_attention.cuh, only into
// attention kernels that split the keys over blocks (split-KV), so every other kernel's source
// stays as it was.
//
// A piece's partials (its O row, its running max and sum) that another block wrote, read from L2,
// never from a stale L1 line: the block merging an item may hold lines of the scratch in L1 from
// an earlier item's merge, and the fence before the read orders the writes without invalidating
// L1. Cached in L2 only; the asm's memory clobber keeps them after that fence.
//
// Two consecutive partials (8 bytes, 8-byte aligned): a piece's running max and sum.
__device__ __forceinline__ void fj_partial2(const float* p, float (&x)[2]) {
  asm volatile("ld.global.cg.v2.f32 {%0, %1}, [%2];" : "=f"(x[0]), "=f"(x[1]) : "l"(p) : "memory");
}
// Four consecutive partials (16 bytes, 16-byte aligned): four columns of a piece's O row.
__device__ __forceinline__ void fj_partial4(const float* p, float (&x)[4]) {
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3])
               : "l"(p)
               : "memory");
}
