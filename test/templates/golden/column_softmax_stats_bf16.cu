// ==== kernel ====
// reduction region
// %1 = cast f32[1024,512] (%0)
// %2 = max f32[1,512] (%1) axes [0] keepdim
// %3 = sub f32[1024,512] (%1, %2)
// %4 = exp f32[1024,512] (%3)
// %5 = sum f32[1,512] (%4) axes [0] keepdim
// reduction, column-style: [1, 1024, 512] reduced over the middle; tiles of 4 x 4 columns, 256 rows of threads
// online softmax pair: max %2 and sum %5 of exp(x - max) in one pass (fj_max_sum)
// 32-bit index arithmetic
extern "C" __global__ void __launch_bounds__(1024) fj_reduction_7c502c6c47f337d8(
    const unsigned short* __restrict__ in0,  // %0 bf16[1024,512]
    float* __restrict__ out0,  // %2 f32[1,512]
    float* __restrict__ out1) {  // %5 f32[1,512]
  __shared__ fj_max_sum part2[32][16];
  const int tx = threadIdx.x % 4;
  const int ty = threadIdx.x / 4;
  for (int t = blockIdx.x; t < 32; t += gridDim.x) {
    const int n0 = (t % 32 * 4 + tx) * 4;
    fj_max_sum a2[4];
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
      a2[j] = {__uint_as_float(0xff800000u), 0.0f};
    }
    #pragma unroll 4
    for (int l = ty; l < 1024; l += 256) {
      unsigned short r0[4];
      fj_load_vec(r0, in0 + l * 512 + n0);
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float x1 = fj_bf16_to_f32(r0[j]);
        const float v1 = x1;  // cast
        a2[j] = fj_op_max_sum<false>()(a2[j], v1);
      }
    }
    // combine the 256 partial results of each column
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
      a2[j] = fj_warp_reduce<4, 32>(a2[j], fj_op_max_sum<false>());
    }
    if ((threadIdx.x & 31) < 4) {
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        part2[threadIdx.x >> 5][tx * 4 + j] = a2[j];
      }
    }
    __syncthreads();
    if (ty == 0) {
      #pragma unroll
      for (int w = 1; w < 32; ++w) {
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
          a2[j] = fj_op_max_sum<false>()(a2[j], part2[w][tx * 4 + j]);
        }
      }
    }
    __syncthreads();
    if (ty == 0) {
      float v2[4];
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        v2[j] = a2[j].m;
      }
      float v5[4];
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        v5[j] = fj_max_sum_total(a2[j]);
      }
      float s0[4];
      float s1[4];
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        s0[j] = v2[j];
        s1[j] = v5[j];
      }
      fj_store_vec(out0 + n0, s0);
      fj_store_vec(out1 + n0, s1);
    }
  }
}
