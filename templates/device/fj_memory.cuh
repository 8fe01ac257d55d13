// fusejit device memory access: N consecutive elements moved as 16-byte (or smaller) words.
//
// The caller guarantees alignment of the global address: buffers are 256-byte aligned and the
// element offset is a multiple of N, so the address is a multiple of N * sizeof(T), which the
// word size divides. The words go through a word array and memcpy into the element array, so
// no local array is accessed through a type (or alignment) it does not have; the copies become
// register moves.

template <int kBytes> struct fj_word;
template <> struct fj_word<16> { typedef uint4 type; };
template <> struct fj_word<8> { typedef uint2 type; };
template <> struct fj_word<4> { typedef unsigned int type; };
template <> struct fj_word<2> { typedef unsigned short type; };
template <> struct fj_word<1> { typedef unsigned char type; };

template <class T, int N>
__device__ __forceinline__ void fj_load_vec(T (&dst)[N], const T* __restrict__ src) {
  constexpr int kTotal = N * static_cast<int>(sizeof(T));
  constexpr int kWord = kTotal >= 16 ? 16 : kTotal;
  typedef typename fj_word<kWord>::type W;
  W words[kTotal / kWord];
  const W* s = reinterpret_cast<const W*>(src);
#pragma unroll
  for (int w = 0; w < kTotal / kWord; ++w) words[w] = s[w];
  memcpy(dst, words, kTotal);
}

template <class T, int N>
__device__ __forceinline__ void fj_store_vec(T* __restrict__ dst, const T (&src)[N]) {
  constexpr int kTotal = N * static_cast<int>(sizeof(T));
  constexpr int kWord = kTotal >= 16 ? 16 : kTotal;
  typedef typename fj_word<kWord>::type W;
  W words[kTotal / kWord];
  memcpy(words, src, kTotal);
  W* d = reinterpret_cast<W*>(dst);
#pragma unroll
  for (int w = 0; w < kTotal / kWord; ++w) d[w] = words[w];
}

// N f32 values stored as f16 or bf16, narrowed two at a time by the packed conversions.
template <bool kBf16, int N>
__device__ __forceinline__ void fj_store_half_vec(unsigned short* __restrict__ dst, const float (&src)[N]) {
  static_assert(N % 2 == 0, "pairs of lanes");
  unsigned packed[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    packed[i] = kBf16 ? fj_f32x2_to_bf16x2(src[2 * i], src[2 * i + 1])
                      : fj_f32x2_to_f16x2(src[2 * i], src[2 * i + 1]);
  }
  fj_store_vec(reinterpret_cast<unsigned*>(dst), packed);
}
template <int N>
__device__ __forceinline__ void fj_store_f16_vec(unsigned short* __restrict__ dst, const float (&src)[N]) {
  fj_store_half_vec<false>(dst, src);
}
template <int N>
__device__ __forceinline__ void fj_store_bf16_vec(unsigned short* __restrict__ dst, const float (&src)[N]) {
  fj_store_half_vec<true>(dst, src);
}
