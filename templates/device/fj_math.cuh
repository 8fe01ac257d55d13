// fusejit device math: one function per elementwise op of the IR (fj_<op name>), overloaded
// on the arithmetic type (float, int, long long, bool), so that the printer writes
// fj_add(a, b) whatever the dtype and the table of differences lives here.
//
// Semantics follow the CPU reference: precise library functions (no fast math); relu,
// maximum and minimum propagate NaN; integer arithmetic wraps around (done in unsigned types,
// where overflow is defined); division is true division (operands arrive as float).

// ---- unary ------------------------------------------------------------------------------

__device__ __forceinline__ float fj_neg(float x) { return -x; }
__device__ __forceinline__ int fj_neg(int x) { return static_cast<int>(0u - static_cast<unsigned>(x)); }
__device__ __forceinline__ long long fj_neg(long long x) {
  return static_cast<long long>(0ull - static_cast<unsigned long long>(x));
}

__device__ __forceinline__ float fj_abs(float x) { return fabsf(x); }
__device__ __forceinline__ int fj_abs(int x) { return x < 0 ? fj_neg(x) : x; }
__device__ __forceinline__ long long fj_abs(long long x) { return x < 0 ? fj_neg(x) : x; }

__device__ __forceinline__ float fj_exp(float x) { return expf(x); }
__device__ __forceinline__ float fj_log(float x) { return logf(x); }
__device__ __forceinline__ float fj_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ float fj_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ float fj_sin(float x) { return sinf(x); }
__device__ __forceinline__ float fj_cos(float x) { return cosf(x); }
__device__ __forceinline__ float fj_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ float fj_reciprocal(float x) { return 1.0f / x; }

// sigmoid(x) = 1 / (1 + e^-x); e^-x overflows to inf for x < -88 and the result is 0.
__device__ __forceinline__ float fj_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
// silu(x) = x * sigmoid(x)
__device__ __forceinline__ float fj_silu(float x) { return x / (1.0f + expf(-x)); }
// gelu(x) = x/2 * (1 + erf(x / sqrt(2)))
__device__ __forceinline__ float fj_gelu(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.707106781186547524f));
}
// gelu_tanh(x) = x/2 * (1 + tanh(u)), u = sqrt(2/pi) * (x + 0.044715 x^3), computed as the
// equal x / (1 + e^(-2u)), which does not cancel where tanh(u) is near -1 (as the reference).
__device__ __forceinline__ float fj_gelu_tanh(float x) {
  const float two_u = 1.59576912160573071f * (x + 0.044715f * x * x * x);
  return x / (1.0f + expf(-two_u));
}

// ---- approximate forms ---------------------------------------------------------------------
// Used only in kernels whose every output is stored as f16 or bf16 (and never with
// FUSEJIT_ROUNDING=node); the error bounds, checked by the GPU tests, are in docs/numerics.md.
// __expf computes 2^(x * log2 e) with the hardware ex2: relative error about 2^-21 plus
// 2^-22.8 * |x| (under 2^-16 for |x| < 88, where e^x is finite), far below f16's 2^-11.
__device__ __forceinline__ float fj_fast_exp(float x) { return __expf(x); }
// 1 / (1 + e^-x) with the fast exponential and reciprocal (e^-x = inf gives 0, as it should).
__device__ __forceinline__ float fj_fast_sigmoid(float x) { return __frcp_rn(1.0f + __expf(-x)); }
__device__ __forceinline__ float fj_fast_silu(float x) { return x * fj_fast_sigmoid(x); }
// a * (1/b) with the correctly rounded reciprocal: two roundings, under 1.5 ulp of f32. A
// divisor the same for many elements (a softmax's sum) then costs one reciprocal per row.
__device__ __forceinline__ float fj_fast_div(float a, float b) { return a * __frcp_rn(b); }
// The hardware tanh (sm_75 on): relative error under 2^-10.9 over the whole range, a quarter of
// bf16's half ulp (2^-9); not used for f16, whose half ulp (2^-11) it would reach.
__device__ __forceinline__ float fj_fast_tanh(float x) {
#if __CUDA_ARCH__ >= 750
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return tanhf(x);
#endif
}
// gelu_tanh(x) = x/2 * (1 + tanh(u)) = x * sigmoid(2u): the sigmoid form has no cancellation
// where tanh(u) is near -1, so its relative error stays that of the fast sigmoid.
__device__ __forceinline__ float fj_fast_gelu_tanh(float x) {
  const float two_u = 1.59576912160573071f * (x + 0.044715f * x * x * x);
  return x * fj_fast_sigmoid(two_u);
}

// relu(x) = x < 0 ? 0 : x, so a NaN passes through.
template <class T>
__device__ __forceinline__ T fj_relu(T x) { return x < T(0) ? T(0) : x; }

// ---- binary -----------------------------------------------------------------------------

__device__ __forceinline__ float fj_add(float a, float b) { return a + b; }
__device__ __forceinline__ int fj_add(int a, int b) {
  return static_cast<int>(static_cast<unsigned>(a) + static_cast<unsigned>(b));
}
__device__ __forceinline__ long long fj_add(long long a, long long b) {
  return static_cast<long long>(static_cast<unsigned long long>(a) + static_cast<unsigned long long>(b));
}

__device__ __forceinline__ float fj_sub(float a, float b) { return a - b; }
__device__ __forceinline__ int fj_sub(int a, int b) {
  return static_cast<int>(static_cast<unsigned>(a) - static_cast<unsigned>(b));
}
__device__ __forceinline__ long long fj_sub(long long a, long long b) {
  return static_cast<long long>(static_cast<unsigned long long>(a) - static_cast<unsigned long long>(b));
}

__device__ __forceinline__ float fj_mul(float a, float b) { return a * b; }
__device__ __forceinline__ int fj_mul(int a, int b) {
  return static_cast<int>(static_cast<unsigned>(a) * static_cast<unsigned>(b));
}
__device__ __forceinline__ long long fj_mul(long long a, long long b) {
  return static_cast<long long>(static_cast<unsigned long long>(a) * static_cast<unsigned long long>(b));
}

__device__ __forceinline__ float fj_div(float a, float b) { return a / b; }

// NaN-propagating (a NaN on either side wins); between equal values (+0 and -0) the first.
// For integers the NaN tests fold away.
template <class T>
__device__ __forceinline__ T fj_maximum(T a, T b) { return a != a ? a : b != b ? b : a < b ? b : a; }
template <class T>
__device__ __forceinline__ T fj_minimum(T a, T b) { return a != a ? a : b != b ? b : b < a ? b : a; }

__device__ __forceinline__ float fj_pow(float a, float b) { return powf(a, b); }
// Integer power by squaring, wrapping like repeated multiplication. A negative exponent gives
// what trunc(a^b) gives: 1 for a == 1, +-1 for a == -1, 0 otherwise (0^-n is inf in the
// reference, whose integer conversion is 0).
template <class T, class U>
__device__ __forceinline__ T fj_ipow(T a, T b) {
  if (b < 0) return a == 1 ? T(1) : a == -1 ? ((b & 1) ? T(-1) : T(1)) : T(0);
  U r = 1, base = static_cast<U>(a);
  for (U e = static_cast<U>(b); e != 0; e >>= 1) {
    if (e & 1) r *= base;
    base *= base;
  }
  return static_cast<T>(r);
}
__device__ __forceinline__ int fj_pow(int a, int b) { return fj_ipow<int, unsigned>(a, b); }
__device__ __forceinline__ long long fj_pow(long long a, long long b) {
  return fj_ipow<long long, unsigned long long>(a, b);
}

// ---- comparison and selection -------------------------------------------------------------

template <class T> __device__ __forceinline__ bool fj_eq(T a, T b) { return a == b; }
template <class T> __device__ __forceinline__ bool fj_ne(T a, T b) { return a != b; }
template <class T> __device__ __forceinline__ bool fj_lt(T a, T b) { return a < b; }
template <class T> __device__ __forceinline__ bool fj_le(T a, T b) { return a <= b; }
template <class T> __device__ __forceinline__ bool fj_gt(T a, T b) { return a > b; }
template <class T> __device__ __forceinline__ bool fj_ge(T a, T b) { return a >= b; }

template <class T>
__device__ __forceinline__ T fj_where(bool c, T a, T b) { return c ? a : b; }
