// fusejit device fast division: index arithmetic over runtime extents (templates/kir/fastdiv.h).
//
// Pasted only into dynamic kernels whose index math divides by a dim of a symbol. The host
// passes each such extent d as `int fj_e<k>` and its magic as `unsigned long long fj_m<k>`
// (multiplier in the low 32 bits, shift above): n / d = (umulhi(n, m) + n) >> shift, exact for
// 0 <= n < 2^31 (the host keeps every dividend there; fastdiv.h has the proof).

__device__ __forceinline__ int fj_fastdiv(int n, unsigned long long magic) {
  const unsigned u = static_cast<unsigned>(n);
  return static_cast<int>((__umulhi(u, static_cast<unsigned>(magic)) + u) >>
                          static_cast<unsigned>(magic >> 32));
}

// n % d, from the quotient.
__device__ __forceinline__ int fj_fastmod(int n, int d, unsigned long long magic) {
  return n - fj_fastdiv(n, magic) * d;
}
