// ==== kernel ====
// pointwise region
// v0 = mul f32[64,256] (in0, in1)
// v1 = add f32[64,256] (v0, in2)
// v2 = relu f32[64,256] (v1)
// pointwise sweep over 16384 elements: 4 per thread and iteration, 16-byte vector accesses where contiguous
// 32-bit index arithmetic
extern "C" __global__ void __launch_bounds__(256) fj_pointwise_64ba37edc7c70a21(
    const float* __restrict__ in0,  // f32[64,256]
    const float* __restrict__ in1,  // f32[64,256]
    const float* __restrict__ in2,  // f32[256]
    float* __restrict__ out0) {  // v2 f32[64,256]
  for (int t = (int)blockIdx.x * 256 + (int)threadIdx.x; t < 4096; t += (int)gridDim.x * 256) {
    const int i0 = t * 4;
    float r0[4];
    fj_load_vec(r0, in0 + i0);
    float r2[4];
    fj_load_vec(r2, in1 + i0);
    float r4[4];
    fj_load_vec(r4, in2 + i0 % 256);
    float s0[4];
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float x1 = r0[j];
      const float x3 = r2[j];
      const float v0 = fj_mul(x1, x3);  // mul
      const float x5 = r4[j];
      const float v1 = fj_add(v0, x5);  // add
      const float v2 = fj_relu(v1);  // relu
      s0[j] = v2;
    }
    fj_store_vec(out0 + i0, s0);
  }
}
