// fusejit random numbers: Philox-4x32-10, the counter-based generator of Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3" (SC 2011), and the uniforms made from it.
//
// One source for both sides: pasted into generated kernels that hold a rand or randn node
// (NVRTC, no headers), and included by the CPU reference (ir/random.h) as plain C++, so that
// the bits the reference computes are the bits the GPU computes. It uses only 32- and 64-bit
// unsigned integer arithmetic, which both compilers define exactly.
//
// The value of element e (its row-major position) of a random node with key `seed` and stream
// `offset` comes from one Philox call:
//   counter = (lo32(e), hi32(e), lo32(offset), hi32(offset)),  key = (lo32(seed), hi32(seed))
// so it depends on (seed, offset, e) alone, never on the launch or the thread that computes it.
// Uniforms take the top 24 bits of an output word: u = (w >> 8) * 2^-24, exactly representable
// in f32, in [0, 1). randn's Box-Muller transform (fj_randn below on the device, ir/interp in
// double on the host) takes 1 - u of word 0, in (0, 1], and u of word 1.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FJ_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FJ_HOST_DEVICE inline
#endif

struct fj_philox_words {
  unsigned int w[4];
};

// One round: two 32x32 -> 64-bit products, their halves crossed with the other words and the
// key.
FJ_HOST_DEVICE void fj_philox_round(unsigned int c[4], unsigned int k0, unsigned int k1) {
  const unsigned long long p0 = (unsigned long long)0xD2511F53u * c[0];
  const unsigned long long p1 = (unsigned long long)0xCD9E8D57u * c[2];
  const unsigned int hi0 = (unsigned int)(p0 >> 32), lo0 = (unsigned int)p0;
  const unsigned int hi1 = (unsigned int)(p1 >> 32), lo1 = (unsigned int)p1;
  const unsigned int c1 = c[1], c3 = c[3];
  c[0] = hi1 ^ c1 ^ k0;
  c[1] = lo1;
  c[2] = hi0 ^ c3 ^ k1;
  c[3] = lo0;
}

// Philox-4x32 with 10 rounds; the key is bumped by the Weyl constants between rounds.
FJ_HOST_DEVICE fj_philox_words fj_philox4x32_10(unsigned int c0, unsigned int c1,
                                                unsigned int c2, unsigned int c3,
                                                unsigned int k0, unsigned int k1) {
  fj_philox_words out;
  unsigned int* c = out.w;
  c[0] = c0;
  c[1] = c1;
  c[2] = c2;
  c[3] = c3;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    fj_philox_round(c, k0, k1);
  }
  return out;
}

// The four words of element e of the stream (seed, offset).
FJ_HOST_DEVICE fj_philox_words fj_random_words(unsigned long long seed, unsigned long long offset,
                                               unsigned long long e) {
  return fj_philox4x32_10((unsigned int)e, (unsigned int)(e >> 32), (unsigned int)offset,
                          (unsigned int)(offset >> 32), (unsigned int)seed,
                          (unsigned int)(seed >> 32));
}

// The top 24 bits of w as a float in [0, 1): exact, the same on both sides.
FJ_HOST_DEVICE float fj_uniform_of(unsigned int w) { return (float)(w >> 8) * 5.9604644775390625e-8f; }

// rand: element e's uniform in [0, 1).
FJ_HOST_DEVICE float fj_rand(unsigned long long seed, unsigned long long offset,
                             unsigned long long e) {
  return fj_uniform_of(fj_random_words(seed, offset, e).w[0]);
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// randn: element e's standard normal, Box-Muller on words 0 and 1:
//   sqrt(-2 ln(1 - u0)) * cos(2 pi u1), with 1 - u0 in (0, 1] so the logarithm is finite.
// Computed in f32 with the precise device functions; the CPU reference computes the same
// formula in double, so the two agree to a few f32 ulps, not bit for bit.
__device__ __forceinline__ float fj_randn(unsigned long long seed, unsigned long long offset,
                                          unsigned long long e) {
  const fj_philox_words r = fj_random_words(seed, offset, e);
  const float u0 = 1.0f - fj_uniform_of(r.w[0]);
  const float u1 = fj_uniform_of(r.w[1]);
  return sqrtf(-2.0f * logf(u0)) * cosf(6.2831853071795864769f * u1);
}
#endif

#undef FJ_HOST_DEVICE
