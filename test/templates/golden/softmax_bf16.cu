// ==== kernel ====
// normalization region
// %1 = max bf16[8,1] (%0) axes [1] keepdim
// %2 = sub bf16[8,1024] (%0, %1)
// %3 = exp bf16[8,1024] (%2)
// %4 = sum bf16[8,1] (%3) axes [1] keepdim
// %5 = div bf16[8,1024] (%3, %4)
// normalization, row-style: 8 rows of 1024 elements; 32 thread(s) per row, 4 vector(s) of 8 per thread; 3 pass(es) over the row, row cached in registers
// 32-bit index arithmetic
extern "C" __global__ void __launch_bounds__(256, 4) fj_normalization_5fc2bfde909f3971(
    const unsigned short* __restrict__ in0,  // %0 bf16[8,1024]
    unsigned short* __restrict__ out0) {  // %5 bf16[8,1024]
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
    float a1 = __uint_as_float(0xff800000u);
    // pass 1
    #pragma unroll
    for (int c = 0; c < 4; ++c) {
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        a1 = fj_op_max()(a1, cache0[c * 8 + j]);
      }
    }
    a1 = fj_warp_reduce<1, 32>(a1, fj_op_max());
    const float v1 = a1;  // max
    float a4 = 0x0p+0f;
    // pass 2
    #pragma unroll
    for (int c = 0; c < 4; ++c) {
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float v2 = fj_sub(cache0[c * 8 + j], v1);  // sub
        const float v3 = fj_fast_exp(v2);  // exp
        a4 = fj_op_sum()(a4, v3);
      }
    }
    a4 = fj_warp_reduce<1, 32>(a4, fj_op_sum());
    const float v4 = a4;  // sum
    // pass 3
    #pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int k0 = (static_cast<int>(c) * 32 + g) * 8;
      float s0[8];
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float v2_1 = fj_sub(cache0[c * 8 + j], v1);  // sub
        const float v3_1 = fj_fast_exp(v2_1);  // exp
        const float v5 = fj_fast_div(v3_1, v4);  // div
        s0[j] = v5;
      }
      fj_store_bf16_vec(out0 + row * 1024 + k0, s0);
    }
  }
}
