// ==== kernel ====
// normalization region
// v0 = max bf16[8,1] (in0) axes [1] keepdim
// v1 = sub bf16[8,1024] (in0, v0)
// v2 = exp bf16[8,1024] (v1)
// v3 = sum bf16[8,1] (v2) axes [1] keepdim
// v4 = div bf16[8,1024] (v2, v3)
// normalization, row-style: 8 rows of 1024 elements; 32 thread(s) per row, 4 vector(s) of 8 per thread; 3 pass(es) over the row, row cached in registers
// 32-bit index arithmetic
extern "C" __global__ void __launch_bounds__(256, 4) fj_normalization_40f1b56302079231(
    const unsigned short* __restrict__ in0,  // bf16[8,1024]
    unsigned short* __restrict__ out0) {  // v4 bf16[8,1024]
  const int g = threadIdx.x % 32;
  for (int row0 = static_cast<int>(blockIdx.x) * 8; row0 < 8; row0 += static_cast<int>(gridDim.x) * 8) {
    const int row = row0 + threadIdx.x / 32;
    // register cache: the row's values that several passes read
    float cache0[32];
    #pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int k0 = (static_cast<int>(c) * 32 + g) * 8;
      unsigned short r0[8];
      fj_load_vec(r0, in0 + row * 1024 + k0);
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float x0 = fj_bf16_to_f32(r0[j]);
        cache0[c * 8 + j] = x0;
      }
    }
    float a0 = __uint_as_float(0xff800000u);
    // pass 1
    #pragma unroll
    for (int c = 0; c < 4; ++c) {
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        a0 = fj_op_max()(a0, cache0[c * 8 + j]);
      }
    }
    a0 = fj_warp_reduce<1, 32>(a0, fj_op_max());
    const float v0 = a0;  // max
    float a3 = 0x0p+0f;
    // pass 2
    #pragma unroll
    for (int c = 0; c < 4; ++c) {
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float v1 = fj_sub(cache0[c * 8 + j], v0);  // sub
        const float v2 = fj_fast_exp(v1);  // exp
        a3 = fj_op_sum()(a3, v2);
      }
    }
    a3 = fj_warp_reduce<1, 32>(a3, fj_op_sum());
    const float v3 = a3;  // sum
    // pass 3
    #pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int k0 = (static_cast<int>(c) * 32 + g) * 8;
      float s0[8];
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float v1_1 = fj_sub(cache0[c * 8 + j], v0);  // sub
        const float v2_1 = fj_fast_exp(v1_1);  // exp
        const float v4 = fj_fast_div(v2_1, v3);  // div
        s0[j] = v4;
      }
      fj_store_bf16_vec(out0 + row * 1024 + k0, s0);
    }
  }
}
