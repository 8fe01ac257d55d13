// ==== kernel ====
// reduction region
// v0 = cast f32[1024,512] (in0)
// v1 = max f32[1,512] (v0) axes [0] keepdim
// v2 = sub f32[1024,512] (v0, v1)
// v3 = exp f32[1024,512] (v2)
// v4 = sum f32[1,512] (v3) axes [0] keepdim
// reduction, column-style: [1, 1024, 512] reduced over the middle; tiles of 4 x 4 columns, 256 rows of threads
// online softmax pair: max v1 and sum v4 of exp(x - max) in one pass (fj_max_sum)
// 32-bit index arithmetic
extern "C" __global__ void __launch_bounds__(1024) fj_reduction_bd79fc385174bd2e(
    const unsigned short* __restrict__ in0,  // bf16[1024,512]
    float* __restrict__ out0,  // v1 f32[1,512]
    float* __restrict__ out1) {  // v4 f32[1,512]
  __shared__ fj_max_sum part1[32][16];
  const int tx = threadIdx.x % 4;
  const int ty = threadIdx.x / 4;
  for (int t = blockIdx.x; t < 32; t += gridDim.x) {
    const int n0 = (t % 32 * 4 + tx) * 4;
    fj_max_sum a1[4];
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
      a1[j] = {__uint_as_float(0xff800000u), 0.0f};
    }
    #pragma unroll 4
    for (int l = ty; l < 1024; l += 256) {
      unsigned short r0[4];
      fj_load_vec(r0, in0 + l * 512 + n0);
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float x1 = fj_bf16_to_f32(r0[j]);
        const float v0 = x1;  // cast
        a1[j] = fj_op_max_sum<false>()(a1[j], v0);
      }
    }
    // combine the 256 partial results of each column
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
      a1[j] = fj_warp_reduce<4, 32>(a1[j], fj_op_max_sum<false>());
    }
    if ((threadIdx.x & 31) < 4) {
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        part1[threadIdx.x >> 5][tx * 4 + j] = a1[j];
      }
    }
    __syncthreads();
    if (ty == 0) {
      #pragma unroll
      for (int w = 1; w < 32; ++w) {
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
          a1[j] = fj_op_max_sum<false>()(a1[j], part1[w][tx * 4 + j]);
        }
      }
    }
    __syncthreads();
    if (ty == 0) {
      float v1[4];
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        v1[j] = a1[j].m;
      }
      float v4[4];
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        v4[j] = fj_max_sum_total(a1[j]);
      }
      float s0[4];
      float s1[4];
      #pragma unroll
      for (int j = 0; j < 4; ++j) {
        s0[j] = v1[j];
        s1[j] = v4[j];
      }
      fj_store_vec(out0 + n0, s0);
      fj_store_vec(out1 + n0, s1);
    }
  }
}
