// fusejit device widening of int8 weights: pasted, after fj_gemv.cuh, only into skinny-GEMM
// kernels whose weights are int8 (weight-only int8), so every other kernel's source stays as it
// was.
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
