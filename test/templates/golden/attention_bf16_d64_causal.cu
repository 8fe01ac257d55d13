// ==== kernel ====
// attention forward (FlashAttention-2): bf16 q[2,8,200,64], k, v [2,4,200,64] (head group 2, 2), mask causal
//   out[b,h,i,:] = sum_j softmax_j(S[b,h,i,j]) v[b,h,j,:], S = scale * q[b,h,i,:] . k[b,h,j,:]
//   block 128: 4 warps x 16 query rows; key tiles of 64; 64 work items
extern "C" __global__ void __launch_bounds__(128, 1) fj_attention_8528c0247a173a3f(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k, const unsigned short* __restrict__ v, unsigned short* __restrict__ o) {
  constexpr int kHeads = 8, kSeqQ = 200, kSeqKv = 200, kD = 64, kDv = 64;
  constexpr int kBlockN = 64, kKPitch = 72, kVPitch = 72;
  constexpr int kQTiles = 4, kKvTiles = 4;
  constexpr long long kWork = 64LL;
  constexpr long long kQb = 102400LL, kQh = 64LL, kQs = 512LL;
  constexpr long long kKb = 51200LL, kKh = 12800LL, kKs = 64LL;
  constexpr long long kVb = 51200LL, kVh = 12800LL, kVs = 64LL;
  constexpr int kKGroup = 2, kVGroup = 2;
  const float kScaleLog2 = 0x1.715476p-3f;  // scale * log2(e)
  const float kFillLog2 = __uint_as_float(0xff800000u);  // fill * log2(e)
  const float kNegInf = __uint_as_float(0xff800000u);
  __shared__ __align__(16) unsigned short ks[kBlockN * kKPitch];
  __shared__ __align__(16) unsigned short vs[kBlockN * kVPitch];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  for (long long w = blockIdx.x; w < kWork; w += gridDim.x) {
    const int qt = kQTiles - 1 - static_cast<int>(w % kQTiles);  // longest rows first
    const long long bh = w / kQTiles, b = bh / kHeads;
    const int h = static_cast<int>(bh % kHeads);
    const int row0 = qt * 64 + warp * 16 + g;  // this lane's rows: row0, row0 + 8
    const unsigned short* qp = q + b * kQb + h * kQh;
    const unsigned short* kp = k + b * kKb + (h / kKGroup) * kKh;
    const unsigned short* vp = v + b * kVb + (h / kVGroup) * kVh;
    unsigned qf[kD / 16][4];
#pragma unroll
    for (int c = 0; c < kD / 16; ++c) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = row0 + (e & 1) * 8;
        const unsigned short* x = qp + i * kQs + c * 16 + (e >> 1) * 8 + 2 * t;
        qf[c][e] = i < kSeqQ ? fj_att_load2(x) : 0u;
      }
    }
    float o_acc[kDv / 8][4];
#pragma unroll
    for (int n = 0; n < kDv / 8; ++n) o_acc[n][0] = o_acc[n][1] = o_acc[n][2] = o_acc[n][3] = 0.0f;
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};  // running max (log2 units), sum
    // causal: tiles whose first key is past the block's last row add nothing
    const int last = (qt * 64 + 63) / kBlockN;
    const int tiles = last + 1 < kKvTiles ? last + 1 : kKvTiles;
    for (int e = tid; e < kBlockN * (kD / 8); e += 128) {
      const int r = e / (kD / 8), c = e % (kD / 8) * 8, key = 0 + r;
      unsigned short* to = ks + r * kKPitch + c;
      const bool in = key < kSeqKv;
      fj_att_copy16_async(to, in ? kp + key * kKs + c : kp, in ? 16 : 0);
    }
    fj_att_async_commit();
    for (int e = tid; e < kBlockN * (kDv / 8); e += 128) {
      const int r = e / (kDv / 8), c = e % (kDv / 8) * 8, key = 0 + r;
      unsigned short* to = vs + r * kVPitch + c;
      const bool in = key < kSeqKv;
      fj_att_copy16_async(to, in ? vp + key * kVs + c : vp, in ? 16 : 0);
    }
    fj_att_async_commit();
    for (int kt = 0; kt < tiles; ++kt) {
      const int key0 = kt * kBlockN;
      fj_att_async_wait<1>();  // K of this tile (V's group may still be in flight)
      __syncthreads();
      float s[kBlockN / 8][4];
#pragma unroll
      for (int n = 0; n < kBlockN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int c = 0; c < kD / 16; ++c) {
#pragma unroll
        for (int n = 0; n < kBlockN / 8; n += 2) {
          unsigned bf[4];
          fj_att_ldmatrix_x4(bf, ks + ((n + (lane >> 4)) * 8 + (lane & 7)) * kKPitch + c * 16 + ((lane >> 3) & 1) * 8);  // keys x features
          const unsigned b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
          fj_att_mma_bf16(s[n], qf[c], b0);
          fj_att_mma_bf16(s[n + 1], qf[c], b1);
        }
      }
      __syncthreads();  // every warp is done with ks
      if (kt + 1 < tiles) {
        for (int e = tid; e < kBlockN * (kD / 8); e += 128) {
          const int r = e / (kD / 8), c = e % (kD / 8) * 8, key = key0 + kBlockN + r;
          unsigned short* to = ks + r * kKPitch + c;
          const bool in = key < kSeqKv;
          fj_att_copy16_async(to, in ? kp + key * kKs + c : kp, in ? 16 : 0);
        }
      }
      fj_att_async_commit();  // empty after the last tile: keeps the count
      const bool diagonal = key0 + kBlockN - 1 > qt * 64;  // some key j > some row i
#pragma unroll
      for (int n = 0; n < kBlockN / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = row0 + (e >> 1) * 8;
          const int j = key0 + n * 8 + 2 * t + (e & 1);
          float x = s[n][e] * kScaleLog2;
          if (diagonal && j > i) x = kFillLog2;
          if (j >= kSeqKv) x = kNegInf;
          s[n][e] = x;
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = m[r];
#pragma unroll
        for (int n = 0; n < kBlockN / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
        mx = fmaxf(mx, fj_att_shfl_xor(mx, 1));
        mx = fmaxf(mx, fj_att_shfl_xor(mx, 2));
        // no finite score yet: subtract 0 instead, so that -inf - -inf never makes a NaN
        const float base = mx == kNegInf ? 0.0f : mx;
        const float alpha = fj_att_exp2(m[r] - base);
        m[r] = mx;
        l[r] *= alpha;
#pragma unroll
        for (int n = 0; n < kDv / 8; ++n) {
          o_acc[n][2 * r] *= alpha;
          o_acc[n][2 * r + 1] *= alpha;
        }
#pragma unroll
        for (int n = 0; n < kBlockN / 8; ++n) {
          s[n][2 * r] = fj_att_exp2(s[n][2 * r] - base);
          s[n][2 * r + 1] = fj_att_exp2(s[n][2 * r + 1] - base);
          l[r] += s[n][2 * r] + s[n][2 * r + 1];
        }
      }
      fj_att_async_wait<1>();  // V of this tile
      __syncthreads();
#pragma unroll
      for (int c = 0; c < kBlockN / 16; ++c) {
        const unsigned pf[4] = {fj_att_pack_bf16(s[2 * c][0], s[2 * c][1]), fj_att_pack_bf16(s[2 * c][2], s[2 * c][3]),
                                fj_att_pack_bf16(s[2 * c + 1][0], s[2 * c + 1][1]), fj_att_pack_bf16(s[2 * c + 1][2], s[2 * c + 1][3])};
#pragma unroll
        for (int n = 0; n < kDv / 8; n += 2) {
          unsigned bf[4];
          fj_att_ldmatrix_x4_trans(bf, vs + (c * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * kVPitch + (n + (lane >> 4)) * 8);  // keys x features, transposed
          const unsigned b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
          fj_att_mma_bf16(o_acc[n], pf, b0);
          fj_att_mma_bf16(o_acc[n + 1], pf, b1);
        }
      }
      __syncthreads();  // every warp is done with vs
      if (kt + 1 < tiles) {
        for (int e = tid; e < kBlockN * (kDv / 8); e += 128) {
          const int r = e / (kDv / 8), c = e % (kDv / 8) * 8, key = key0 + kBlockN + r;
          unsigned short* to = vs + r * kVPitch + c;
          const bool in = key < kSeqKv;
          fj_att_copy16_async(to, in ? vp + key * kVs + c : vp, in ? 16 : 0);
        }
      }
      fj_att_async_commit();
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += fj_att_shfl_xor(l[r], 1);
      l[r] += fj_att_shfl_xor(l[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = row0 + 8 * r;
      if (i >= kSeqQ) continue;
      const float inv = 1.0f / l[r];
      unsigned short* x = o + (bh * kSeqQ + i) * kDv + 2 * t;
#pragma unroll
      for (int n = 0; n < kDv / 8; ++n) fj_att_store2(x + n * 8, fj_att_pack_bf16(o_acc[n][2 * r] * inv, o_acc[n][2 * r + 1] * inv));
    }
  }
}
