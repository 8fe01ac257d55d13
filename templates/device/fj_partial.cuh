// fusejit device read of a split kernel's partials: pasted, after fj_attention.cuh, only into
// attention kernels that split the keys over blocks (split-KV), so every other kernel's source
// stays as it was.
//
// A piece's partial (its O, running max or sum) that another block wrote, read from L2, never
// from a stale L1 line: the block combining an item may hold lines of the scratch in L1 from an
// earlier item's combine, and the fence before the read orders the writes without invalidating
// L1.
__device__ __forceinline__ float fj_partial(const float* p) {
  return *static_cast<const volatile float*>(p);
}
// Four consecutive partials (16 bytes, 16-byte aligned) the same way: cached in L2 only.
__device__ __forceinline__ void fj_partial4(const float* p, float (&x)[4]) {
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3])
               : "l"(p)
               : "memory");
}
