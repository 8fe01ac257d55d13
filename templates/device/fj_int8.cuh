// fusejit device conversions to i8: pasted, after fj_core.cuh, only into kernels of regions
// that read or write i8 values (weight-only int8 GEMMs dequantize without it), so every other
// kernel's source stays as it was.
//
// An i8 value is computed in a variable of its storage type, signed char (templates/emit.cpp):
// the operands of an op are promoted to int, and the assignment of its result wraps to 8 bits,
// as the reference wraps each node. Converting to i8 truncates toward zero, then wraps modulo
// 2^8, as fj_to_i32 does at 32 bits (a float of magnitude 2^31 or more is a multiple of 2^8:
// 0); NaN and the infinities give 0. The other conversions take an i8 operand through their
// int overloads (integral promotion).

__device__ __forceinline__ signed char fj_to_i8(float x) {
  if (!fj_is_finite(x)) return 0;
  const float t = truncf(x);
  if (!(t >= -0x1p31f && t < 0x1p31f)) return 0;
  return static_cast<signed char>(
      static_cast<unsigned char>(static_cast<unsigned>(static_cast<int>(t))));
}
__device__ __forceinline__ signed char fj_to_i8(int x) {
  return static_cast<signed char>(static_cast<unsigned char>(static_cast<unsigned>(x)));
}
__device__ __forceinline__ signed char fj_to_i8(long long x) {
  return static_cast<signed char>(static_cast<unsigned char>(static_cast<unsigned long long>(x)));
}
__device__ __forceinline__ signed char fj_to_i8(bool x) { return x ? 1 : 0; }
__device__ __forceinline__ signed char fj_to_i8(signed char x) { return x; }
