// fusejit device core: storage formats and dtype conversions.
//
// Pasted at the top of every generated kernel (NVRTC compiles it with no include path and no
// CUDA headers). Storage formats: f32 as float, f16/bf16 as their 16-bit patterns in an
// unsigned short, i32 as int, i64 as long long, bool as one byte 0/1. Arithmetic types: float
// for the three float dtypes, int, long long, bool.
//
// Rounding matches the CPU reference (ir/host_tensor): f16 and bf16 round to nearest even,
// overflow goes to infinity, every NaN becomes the quiet NaN 0x7fff. Float to integer
// truncates toward zero and wraps modulo 2^bits; NaN and infinities give 0.

// ---- f16 and bf16 bit patterns ----------------------------------------------------------

// f16 <-> f32 with the PTX conversions: exact, one instruction each, and no cuda_fp16.h.
__device__ __forceinline__ float fj_f16_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short fj_f32_to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

// bf16 is the top half of an f32: widening is a shift. Narrowing rounds to nearest even: one
// `cvt.rn.bf16.f32` from sm_80 on (NaN becomes the canonical 0x7fff); before that, integer
// rounding on the 16 dropped bits (add just under half, plus one when the kept part is odd; a
// carry into the exponent lands on infinity, as it should).
__device__ __forceinline__ float fj_bf16_to_f32(unsigned short b) {
  return __uint_as_float(static_cast<unsigned>(b) << 16);
}
__device__ __forceinline__ unsigned short fj_f32_to_bf16(float f) {
#if __CUDA_ARCH__ >= 800
  unsigned short b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
  return b;
#else
  const unsigned x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  return static_cast<unsigned short>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
#endif
}

// Two values narrowed at once, `lo` in the low half: one packed conversion each
// (`cvt.rn.f16x2.f32`, and `cvt.rn.bf16x2.f32` from sm_80 on).
__device__ __forceinline__ unsigned fj_f32x2_to_f16x2(float lo, float hi) {
#if __CUDA_ARCH__ >= 800
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<unsigned>(fj_f32_to_f16(lo)) | (static_cast<unsigned>(fj_f32_to_f16(hi)) << 16);
#endif
}
__device__ __forceinline__ unsigned fj_f32x2_to_bf16x2(float lo, float hi) {
#if __CUDA_ARCH__ >= 800
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<unsigned>(fj_f32_to_bf16(lo)) | (static_cast<unsigned>(fj_f32_to_bf16(hi)) << 16);
#endif
}

// The value an f32 becomes once stored as f16 or bf16 (every f16/bf16 node is rounded so, as
// the reference rounds every node to its dtype).
__device__ __forceinline__ float fj_round_f16(float f) { return fj_f16_to_f32(fj_f32_to_f16(f)); }
__device__ __forceinline__ float fj_round_bf16(float f) { return fj_bf16_to_f32(fj_f32_to_bf16(f)); }

// bool storage: one byte.
__device__ __forceinline__ bool fj_u8_to_bool(unsigned char b) { return b != 0; }
__device__ __forceinline__ unsigned char fj_bool_to_u8(bool b) { return b ? 1 : 0; }

// ---- conversions between arithmetic types ----------------------------------------------

__device__ __forceinline__ bool fj_is_finite(float x) {
  return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}

__device__ __forceinline__ float fj_to_f32(float x) { return x; }
__device__ __forceinline__ float fj_to_f32(int x) { return static_cast<float>(x); }
__device__ __forceinline__ float fj_to_f32(long long x) { return static_cast<float>(x); }
__device__ __forceinline__ float fj_to_f32(bool x) { return x ? 1.0f : 0.0f; }

// Truncates, then wraps modulo 2^32 (a float beyond 2^31 is an exact multiple of 2^8, so the
// double fmod is exact).
__device__ __forceinline__ int fj_to_i32(float x) {
  if (!fj_is_finite(x)) return 0;
  const float t = truncf(x);
  if (t >= -0x1p31f && t < 0x1p31f) return static_cast<int>(t);
  double m = fmod(static_cast<double>(t), 0x1p32);
  if (m < 0.0) m += 0x1p32;
  return static_cast<int>(static_cast<unsigned>(m));
}
__device__ __forceinline__ int fj_to_i32(int x) { return x; }
__device__ __forceinline__ int fj_to_i32(long long x) {
  return static_cast<int>(static_cast<unsigned>(static_cast<unsigned long long>(x)));
}
__device__ __forceinline__ int fj_to_i32(bool x) { return x ? 1 : 0; }

__device__ __forceinline__ long long fj_to_i64(float x) {
  if (!fj_is_finite(x)) return 0;
  const float t = truncf(x);
  if (t >= -0x1p63f && t < 0x1p63f) return static_cast<long long>(t);
  double m = fmod(static_cast<double>(t), 0x1p64);
  if (m < 0.0) m += 0x1p64;
  return static_cast<long long>(static_cast<unsigned long long>(m));
}
__device__ __forceinline__ long long fj_to_i64(int x) { return x; }
__device__ __forceinline__ long long fj_to_i64(long long x) { return x; }
__device__ __forceinline__ long long fj_to_i64(bool x) { return x ? 1 : 0; }

__device__ __forceinline__ bool fj_to_bool(float x) { return x != 0.0f; }  // NaN is true
__device__ __forceinline__ bool fj_to_bool(int x) { return x != 0; }
__device__ __forceinline__ bool fj_to_bool(long long x) { return x != 0; }
__device__ __forceinline__ bool fj_to_bool(bool x) { return x; }
