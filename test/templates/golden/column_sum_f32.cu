// ==== kernel ====
// reduction region
// v0 = sum f32[512] (in0) axes [0]
// reduction, column-style: [1, 1024, 512] reduced over the middle; tiles of 2 x 4 columns, 512 rows of threads
// 32-bit index arithmetic
extern "C" __global__ void __launch_bounds__(1024) fj_reduction_eeec12dfd9c799f9(
    const float* __restrict__ in0,  // f32[1024,512]
    float* __restrict__ out0) {  // v0 f32[512]
  __shared__ float part0[32][8];
  const int tx = threadIdx.x % 2;
  const int ty = threadIdx.x / 2;
  for (int t = blockIdx.x; t < 64; t += gridDim.x) {
    const int n0 = (t % 64 * 2 + tx) * 4;
    float a0[4];
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
      a0[j] = 0x0p+0f;
    }
    #pragma unroll 4
    for (int l = ty; l < 1024; l += 512) {
      float r0[4];
      fj_load_vec(r0, in0 + l * 512 + n0);
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float x1 = r0[j];
        a0[j] = fj_op_sum()(a0[j], x1);
      }
    }
    // combine the 512 partial results of each column
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
      a0[j] = fj_warp_reduce<2, 32>(a0[j], fj_op_sum());
    }
    if ((threadIdx.x & 31) < 2) {
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        part0[threadIdx.x >> 5][tx * 4 + j] = a0[j];
      }
    }
    __syncthreads();
    if (ty == 0) {
      #pragma unroll
      for (int w = 1; w < 32; ++w) {
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
          a0[j] = fj_op_sum()(a0[j], part0[w][tx * 4 + j]);
        }
      }
    }
    __syncthreads();
    if (ty == 0) {
      float v0[4];
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        v0[j] = a0[j];
      }
      float s0[4];
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        s0[j] = v0[j];
      }
      fj_store_vec(out0 + n0, s0);
    }
  }
}
