// test/templates/emulate/cuda_shim: what a generated attention kernel's body (the text after
// kKernelMarker) needs to compile and run as host C++, for the CPU emulation test. Not part of
// the library; the test compiles this header, the body and a launcher into a shared object.
//
// A launch runs its blocks one at a time, each on `block` real threads: __syncthreads is a
// barrier of the block, and every warp-collective operation (shuffles, the mma) is a barrier of
// the warp around an exchange array. __shared__ variables become function statics, which one
// block at a time makes correct.
//
// The helpers of templates/device/fj_attention.cuh are written here again from the PTX ISA's
// description, not from that file: the mma rebuilds the whole 16x16 A and 16x8 B from the 32
// lanes' registers by the documented fragment layouts, so a kernel that put an element in the
// wrong register gets a wrong product here, as on the GPU.
#pragma once

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

struct fj_emu_dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local fj_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

// A split kernel's count of arrived pieces (the GEMV's, attention's split-KV). Blocks run one
// after another here, so the fence orders nothing the emulation could reorder.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  return std::atomic_ref<unsigned>(*p).fetch_add(v);
}

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

namespace fj_emu {

// Two exchange slots used in turn: a lane writes slot n % 2 at its n-th collective and reads it
// after the warp's barrier; before it writes that slot again (collective n + 2) it has passed
// the barrier of collective n + 1, which every lane reaches only after reading slot n % 2.
struct Slot {
  unsigned a[32][4];
  unsigned b[32][2];
  float value[32];
  const uint16_t* row[32];
};
struct Warp {
  std::barrier<> sync{32};
  Slot slot[2];
};
struct Block {
  explicit Block(int threads) : sync(threads) {
    for (int i = 0; i < threads / 32; ++i) warps.push_back(std::make_unique<Warp>());
  }
  std::barrier<> sync;
  std::vector<std::unique_ptr<Warp>> warps;
};

// Accesses whose device instruction would fault for misalignment (checked by the test).
inline std::atomic<long> misaligned{0};
inline bool aligned(const void* p, uintptr_t bytes) {
  if (reinterpret_cast<uintptr_t>(p) % bytes == 0) return true;
  ++misaligned;
  return false;
}

inline thread_local Block* block = nullptr;
inline thread_local unsigned collectives = 0;  // this lane's warp-collective operations so far

inline int lane() { return static_cast<int>(threadIdx.x % 32); }
inline Warp& warp() { return *block->warps[threadIdx.x / 32]; }
inline Slot& next_slot() { return warp().slot[collectives++ % 2]; }

// ---- storage formats, decoded and rounded by the IEEE rules ----------------------------------

inline float bf16_value(uint16_t bits) { return __uint_as_float(static_cast<unsigned>(bits) << 16); }
inline uint16_t bf16_bits(float f) {  // round to nearest even; NaN to the quiet 0x7fff
  if (std::isnan(f)) return 0x7fff;
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  const unsigned rest = u & 0xffffu, kept = u >> 16;
  const bool up = rest > 0x8000u || (rest == 0x8000u && (kept & 1u) != 0);
  return static_cast<uint16_t>(kept + (up ? 1u : 0u));
}
inline float f16_value(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}
inline uint16_t f16_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);  // IEEE conversion, round to nearest even
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

// ---- mma.m16n8k16.row.col, f32 accumulators ---------------------------------------------------

// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type": with
// groupID = lane >> 2 and threadID_in_group = lane % 4, element i (0..7) of A's four registers
// (two per register, low half first) sits at
//   row = groupID for i < 2 or 4 <= i < 6, else groupID + 8
//   col = threadID_in_group * 2 + (i & 1), plus 8 for i >= 4;
// element i (0..3) of B's two registers at
//   row (k) = threadID_in_group * 2 + (i & 1), plus 8 for i >= 2;  col (n) = groupID;
// element i (0..3) of C and D at
//   row = groupID for i < 2, else groupID + 8;  col = threadID_in_group * 2 + (i & 1).
template <float (*decode)(uint16_t)>
void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  Slot& s = next_slot();
  const int me = lane();
  for (int r = 0; r < 4; ++r) s.a[me][r] = a[r];
  for (int r = 0; r < 2; ++r) s.b[me][r] = b[r];
  warp().sync.arrive_and_wait();
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int group = l >> 2, in_group = l % 4;
    for (int i = 0; i < 8; ++i) {
      const int row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
      const int col = in_group * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = decode(static_cast<uint16_t>(s.a[l][i / 2] >> (16 * (i % 2))));
    }
    for (int i = 0; i < 4; ++i) {
      const int row = in_group * 2 + (i & 1) + (i >= 2 ? 8 : 0);
      B[row][group] = decode(static_cast<uint16_t>(s.b[l][i / 2] >> (16 * (i % 2))));
    }
  }
  const int group = me >> 2, in_group = me % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = i < 2 ? group : group + 8;
    const int col = in_group * 2 + (i & 1);
    double sum = 0.0;
    for (int kk = 0; kk < 16; ++kk) sum += static_cast<double>(A[row][kk]) * B[kk][col];
    d[i] = static_cast<float>(d[i] + sum);
  }
}

// PTX ISA, ldmatrix: for .x4, threads 0-7, 8-15, 16-23, 24-31 give the addresses of rows 0-7
// of matrices 0, 1, 2, 3; each thread then holds, per matrix, two consecutive elements of
// row laneid >> 2 at columns (laneid % 4) * 2 and + 1; .trans loads the matrix transposed, so
// those two elements are column laneid >> 2 of rows (laneid % 4) * 2 and + 1 as stored.
inline void ldmatrix_x4(unsigned (&r)[4], const uint16_t* row, bool trans) {
  Slot& s = next_slot();
  aligned(row, 16);
  s.row[lane()] = row;
  warp().sync.arrive_and_wait();
  const int me = lane();
  for (int m = 0; m < 4; ++m) {
    uint16_t e[2];
    for (int i = 0; i < 2; ++i) {
      const int stored_row = trans ? (me % 4) * 2 + i : me >> 2;
      const int stored_col = trans ? me >> 2 : (me % 4) * 2 + i;
      e[i] = s.row[8 * m + stored_row][stored_col];
    }
    r[m] = e[0] | (static_cast<unsigned>(e[1]) << 16);
  }
}

// cp.async: a thread's copies wait in commit groups and are made only when the thread waits
// for their group (the latest moment the PTX ISA allows), so a kernel that reads shared
// memory before the wait (or, in another thread, before the barrier after it) reads stale data.
struct AsyncCopy {
  void* dst;
  const void* src;
  int bytes;  // read from src; the rest of 16 zero-filled
};
inline thread_local std::vector<AsyncCopy> open_group;
// Between a kernel's fj_grid_dependents_launch() and its fj_grid_dependency_wait() (per thread,
// reset at each block).
inline thread_local bool before_wait = false;
inline thread_local std::vector<std::vector<AsyncCopy>> committed;
inline void async_wait(size_t keep) {
  while (committed.size() > keep) {
    for (const AsyncCopy& c : committed.front()) {
      std::memset(c.dst, 0, 16);
      std::memcpy(c.dst, c.src, c.bytes);
    }
    committed.erase(committed.begin());
  }
}

inline float shfl_xor(float v, int m) {
  Slot& s = next_slot();
  s.value[lane()] = v;
  warp().sync.arrive_and_wait();
  return s.value[lane() ^ m];
}

// Runs `kernel` on a grid of `grid` blocks of `threads` threads, its arguments taken from
// `args` (one pointer each, converted to the parameter's type).
template <class... P, size_t... I>
void call(void (*kernel)(P...), void* const* args, std::index_sequence<I...>) {
  kernel(static_cast<P>(args[I])...);
}
template <class... P>
void launch(void (*kernel)(P...), void* const* args, int grid, int threads) {
  Block shared_block(threads);
  std::vector<std::thread> pool;
  for (int tid = 0; tid < threads; ++tid) {
    pool.emplace_back([&, tid] {
      block = &shared_block;
      collectives = 0;
      threadIdx.x = static_cast<unsigned>(tid);
      blockDim.x = static_cast<unsigned>(threads);
      gridDim.x = static_cast<unsigned>(grid);
      for (int bx = 0; bx < grid; ++bx) {
        blockIdx.x = static_cast<unsigned>(bx);
        before_wait = false;
        call(kernel, args, std::index_sequence_for<P...>{});
        shared_block.sync.arrive_and_wait();  // the next block reuses the statics
      }
    });
  }
  for (std::thread& t : pool) t.join();
}

}  // namespace fj_emu

// ---- what the kernel body calls --------------------------------------------------------------

inline void __syncthreads() { fj_emu::block->sync.arrive_and_wait(); }

// Programmatic dependent launch (templates/device/fj_pdl.cuh): one launch at a time here, so
// the grid ahead has always finished. What a kernel reads before its wait (an L2 prefetch, or a
// copy into shared memory: read_before_wait) must stay inside the buffer no kernel writes (the
// weights): each such read is counted, and counted again when it falls outside the range the
// test names (fj_emu_prefetch_range).
namespace fj_emu {
inline std::atomic<const char*> prefetch_lo{nullptr}, prefetch_hi{nullptr};
inline std::atomic<long> prefetches{0}, prefetches_outside{0};
inline void read_before_wait(const void* p) {
  const char* at = static_cast<const char*>(p);
  ++prefetches;
  if (at < prefetch_lo.load() || at >= prefetch_hi.load()) ++prefetches_outside;
}
}  // namespace fj_emu
inline void fj_grid_dependents_launch() { fj_emu::before_wait = true; }
inline void fj_grid_dependency_wait() { fj_emu::before_wait = false; }
inline void fj_prefetch_l2(const void* p) { fj_emu::read_before_wait(p); }
// The range prefetches must fall in, the counts reset; then the counts of the launches since.
extern "C" void fj_emu_prefetch_range(const void* lo, size_t bytes) {
  fj_emu::prefetch_lo = static_cast<const char*>(lo);
  fj_emu::prefetch_hi = static_cast<const char*>(lo) + bytes;
  fj_emu::prefetches = 0;
  fj_emu::prefetches_outside = 0;
}
extern "C" long fj_emu_prefetches(int outside) {
  return outside ? fj_emu::prefetches_outside.load() : fj_emu::prefetches.load();
}

inline void fj_att_mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  fj_emu::mma<fj_emu::bf16_value>(d, a, b);
}
inline void fj_att_mma_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  fj_emu::mma<fj_emu::f16_value>(d, a, b);
}
inline unsigned fj_att_pack_bf16(float lo, float hi) {
  return fj_emu::bf16_bits(lo) | (static_cast<unsigned>(fj_emu::bf16_bits(hi)) << 16);
}
inline unsigned fj_att_pack_f16(float lo, float hi) {
  return fj_emu::f16_bits(lo) | (static_cast<unsigned>(fj_emu::f16_bits(hi)) << 16);
}
inline float fj_att_widen_bf16(unsigned short x) { return fj_emu::bf16_value(x); }
inline float fj_att_widen_f16(unsigned short x) { return fj_emu::f16_value(x); }
inline float fj_att_widen_f32(float x) { return x; }
inline float fj_att_exp2(float x) { return std::exp2(x); }
inline float fj_att_shfl_xor(float v, int m) { return fj_emu::shfl_xor(v, m); }
inline void fj_att_ldmatrix_x4(unsigned (&r)[4], const unsigned short* row) {
  fj_emu::ldmatrix_x4(r, row, false);
}
inline void fj_att_ldmatrix_x4_trans(unsigned (&r)[4], const unsigned short* row) {
  fj_emu::ldmatrix_x4(r, row, true);
}
inline unsigned fj_att_load2(const unsigned short* p) {
  fj_emu::aligned(p, 4);  // one 4-byte load on the device
  unsigned x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
inline void fj_att_store2(unsigned short* p, unsigned x) {
  fj_emu::aligned(p, 4);
  std::memcpy(p, &x, sizeof x);
}
inline void fj_att_copy16_async(unsigned short* dst, const unsigned short* src, int bytes) {
  fj_emu::aligned(dst, 16);
  if (bytes > 0) fj_emu::aligned(src, 16);
  fj_emu::open_group.push_back({dst, src, bytes});
}
inline void fj_att_async_commit() {
  fj_emu::committed.push_back(std::move(fj_emu::open_group));
  fj_emu::open_group.clear();
}
template <int N>
void fj_att_async_wait() {
  fj_emu::async_wait(N);
}
inline unsigned fj_att_join(unsigned short lo, unsigned short hi) {
  return lo | (static_cast<unsigned>(hi) << 16);
}

inline void fj_partial2(const float* p, float (&x)[2]) {
  fj_emu::aligned(p, 8);
  std::memcpy(x, p, sizeof x);
}
inline void fj_partial4(const float* p, float (&x)[4]) {
  fj_emu::aligned(p, 16);
  std::memcpy(x, p, sizeof x);
}

extern "C" long fj_emu_misaligned() { return fj_emu::misaligned.load(); }
