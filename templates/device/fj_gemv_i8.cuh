// fusejit device widening of int8 weights: pasted, after fj_gemv.cuh (whose fj_gemv_f16x2_sub
// it uses), only into skinny-GEMM kernels whose weights are int8 (weight-only int8), so every
// other kernel's source stays as it was.
//
// An int8 weight as f32, exactly, through the integer and FP32 pipes instead of the conversion
// unit. A cast (I2F) gives 16 results a clock per SM on sm_90, and such a kernel widens one
// weight per byte it streams: by that rate, a stage's casts took about as long as its loads, and
// the cast-based kernel ran at 49-55% of copy on an H100 where the bf16 one reaches 82-94%. Here
// the byte with its sign bit flipped (x + 128, in 0..255) becomes the low mantissa byte of 2^23, so
// the float is 2^23 + 128 + x; subtracting 2^23 + 128 leaves x, exactly (both are integers
// below 2^24): one byte permute or logic op, and one add.
__device__ __forceinline__ float fj_gemv_i8_to_f32(signed char x) {
  return __uint_as_float(0x4B000000u | (static_cast<unsigned char>(x) ^ 0x80u)) - 8388736.0f;
}

// Four int8 weights, one 32-bit word of a weight vector (lowest byte first), with their four
// sign bits flipped by one XOR: each byte is then x + 128, as the conversions below want it.
__device__ __forceinline__ unsigned fj_gemv_i8x4_biased(const signed char* in) {
  unsigned w;
  memcpy(&w, in, 4);
  return w ^ 0x80808080u;
}

// Those four weights as four f32, the values fj_gemv_i8_to_f32 gives, in fewer instructions:
// after the one XOR, one byte permute (PRMT) puts each byte into the low byte of 2^23's pattern,
// and one add takes 2^23 + 128 off. Where the bytes come one by one, each costs a shift or mask
// of its own besides.
__device__ __forceinline__ void fj_gemv_i8x4_to_f32(float* out, const signed char* in) {
  const unsigned w = fj_gemv_i8x4_biased(in);
  out[0] = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7440)) - 8388736.0f;
  out[1] = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7441)) - 8388736.0f;
  out[2] = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7442)) - 8388736.0f;
  out[3] = __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7443)) - 8388736.0f;
}

// Two int8 weights as one register of two bf16 or two f16 (the tensor-core kernel's operand
// words), `lo` in the low half, exactly, with no conversion instruction. bf16: each as f32 as
// above; an integer of at most 8 significant bits leaves an f32's low 16 bits zero, so its bf16
// is the f32's high half, and one byte permute joins the two. f16: 1024 + (x + 128) is an f16 of
// exponent 10 whose low byte is x + 128 (f16 holds every integer in 1024..2047), so both
// halves are built by logic ops, and one f16x2 subtraction of 1152 leaves x.
__device__ __forceinline__ unsigned fj_gemv_i8x2_to_bf16x2(signed char lo, signed char hi) {
  return __byte_perm(__float_as_uint(fj_gemv_i8_to_f32(lo)), __float_as_uint(fj_gemv_i8_to_f32(hi)),
                     0x7632);
}
__device__ __forceinline__ unsigned fj_gemv_i8x2_to_f16x2(signed char lo, signed char hi) {
  const unsigned biased = 0x64006400u | (static_cast<unsigned char>(lo) ^ 0x80u) |
                          ((static_cast<unsigned char>(hi) ^ 0x80u) << 16);
  return fj_gemv_f16x2_sub(biased, 0x64806480u);
}

// The same for a word of four int8 weights (lowest byte first) at once, into two registers, the
// words the pairs (0, 1) and (2, 3) give above. bf16: the four f32 of fj_gemv_i8x4_to_f32,
// each pair's high halves joined by a byte permute. f16: after the one XOR, one byte permute
// places two bytes under 1024's pattern and one f16x2 subtraction leaves them.
__device__ __forceinline__ void fj_gemv_i8x4_to_bf16x2(unsigned* out, const signed char* in) {
  float f[4];
  fj_gemv_i8x4_to_f32(f, in);
  out[0] = __byte_perm(__float_as_uint(f[0]), __float_as_uint(f[1]), 0x7632);
  out[1] = __byte_perm(__float_as_uint(f[2]), __float_as_uint(f[3]), 0x7632);
}
__device__ __forceinline__ void fj_gemv_i8x4_to_f16x2(unsigned* out, const signed char* in) {
  const unsigned w = fj_gemv_i8x4_biased(in);
  out[0] = fj_gemv_f16x2_sub(__byte_perm(w, 0x64006400u, 0x7150), 0x64806480u);
  out[1] = fj_gemv_f16x2_sub(__byte_perm(w, 0x64006400u, 0x7352), 0x64806480u);
}
