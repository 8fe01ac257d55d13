// templates/gemv: the skinny GEMM, D = act(alpha * (A @ B) + beta * C + bias) for A of M = 1..16
// rows, as a generated kernel instead of a cuBLASLt call (off by default: CodegenOptions::gemv).
// Decode-time matmuls are memory-bound: the kernel reads each weight element once, in 16-byte
// vectors where K allows, keeps A's few rows in shared memory (the whole piece of K a block
// takes, in A's dtype, copied once before the weights stream; where that does not fit, one
// stage of K at a time as f32), streams the weights through a ring of stages in shared memory
// where it has room (else two stages in registers), accumulates in f32 and applies the epilogue
// at the store.
//
// Work: a tile of weight rows (outputs along N) times a piece of K. Each warp of a block takes
// `rows` weight rows of the tile, its lanes split the stage's K (so the warps of a block share
// one staged copy of A); a tile's pieces (split-K, where the tiles alone would leave the GPU
// idle) write f32 partials to module-scope scratch and the tile's last block to arrive adds
// them in piece order, so the result does not depend on timing (no float atomics).
#pragma once

#include <cstdint>
#include <string>

#include "fusejit/dtype.h"
#include "fusion/plan.h"
#include "templates/builders.h"
#include "templates/kernel.h"
#include "templates/schedulers/registry.h"
#include "templates/target.h"

namespace fusejit::templates {

struct GemvPrologue;
struct GemvEpilogue;

// One GEMM of the skinny kind: A [M, K] (or stored [K, M] when transpose_a), B the weights,
// stored [N, K] when transpose_b (linear's weight: matmul(x, weight^T)), D [M, N] row-major; bias
// [N], residual C [M, N]; all of `dtype`.
struct GemvSpec {
  DType dtype = DType::bf16;
  int64_t m = 1, n = 1, k = 1;
  bool transpose_a = false;
  bool transpose_b = true;
  bool bias = false;
  bool residual = false;
  double alpha = 1.0, beta = 0.0;
  fusion::GemmEpilogue::Activation activation = fusion::GemmEpilogue::Activation::none;
  // Weight-only int8 (fusion::GemmEpilogue::int8_b): the weights are i8, widened to f32 as
  // they are read; `scale`: a [N] vector of `dtype` multiplies each output before C and the
  // bias, D = act(alpha * (A @ B) * scale + beta * C + bias).
  bool int8_weights = false;
  bool scale = false;
  // Not null: A is not read from memory but computed as it is staged, from the region whose one
  // output it is (GemvPrologue). The kernel's A argument is then that region's inputs.
  const GemvPrologue* prologue = nullptr;
  // Not null: D is not stored but read, as the kernel holds it, by the region whose one input it
  // is (GemvEpilogue), which the kernel evaluates at its store. The kernel's D argument is then
  // that region's output.
  const GemvEpilogue* epilogue = nullptr;
  // The weights may stream through a ring in shared memory (GemvParams::ring) where it fits;
  // false keeps two stages in registers. The library sets it from CodegenOptions::gemv_ring.
  bool ring = true;
};

// The region that computes a skinny GEMM's A, evaluated inside the GEMM's kernel as A is
// staged into shared memory, so that A is never written to memory and read back (a
// decode step's silu(gate) * up before the down projection, the RMS norm before q/k/v). The
// region is a pointwise one, or (for M = 1) a normalization over A's one row whose reductions
// read no other reduction's result (RMS norm; not layer norm's variance of x - mean): each block
// then computes the row's statistics itself before its first stage (K elements, from L2). `graph`
// and `region` must outlive the generated kernel's making; `codegen` is what the region's own
// kernel would have been generated with (rounding, fast math).
struct GemvPrologue {
  const ir::Graph* graph = nullptr;
  const fusion::Region* region = nullptr;
  CodegenOptions codegen;
};

// The region that reads a skinny GEMM's D, evaluated inside the GEMM's kernel at its store, so
// that D is never written to memory and read back (a decode step's silu(gate) * up after the
// fused gate/up projection). The region is pointwise, D is its only input, and each of its
// output elements reads D as it is or through slices of D's last dim that are `groups` equal
// runs of it: out[m, j] = f(D[m, j + c * N / groups] for c < groups). `graph` and `region` must
// outlive the generated kernel's making; `codegen` is what the region's own kernel would have
// been generated with.
struct GemvEpilogue {
  const ir::Graph* graph = nullptr;
  const fusion::Region* region = nullptr;
  CodegenOptions codegen;
};

// The weights' element type: i8 with int8_weights, else the spec's dtype.
inline DType gemv_weight_dtype(const GemvSpec& s) { return s.int8_weights ? DType::i8 : s.dtype; }

// The most rows of A the kernel takes (its accumulators are M per weight row, in registers).
inline constexpr int64_t kGemvMaxRows = 16;

// GemvMode::large takes one row against weights of at least this many elements (N x K).
inline constexpr int64_t kGemvLargeMinWeights = int64_t(1) << 24;

// Why the kernel does not take the spec, or "" when it does.
std::string refuse_gemv(const GemvSpec& spec);
// Why the kernel cannot compute the spec's A from `producer` (a region of `g` whose one output
// is A) as it stages it, or "" when it can: the CUDA-core variant only (the tensor-core one
// reads A in fragments, straight from memory), and the region's kind and reductions as
// GemvPrologue says.
std::string refuse_prologue(const GemvSpec& spec, const ir::Graph& g,
                            const fusion::Region& producer);
// Why the kernel cannot evaluate `consumer` (a region of `g` whose one input is D) at its
// store, or "" when it can: the CUDA-core variant (the tensor-core one ran slower with it), a
// pointwise region of one output whose nodes all have that output's shape and read D as
// GemvEpilogue says, its runs dividing the rows a warp takes. With K split, the tile's last
// block evaluates it from the pieces' partials.
std::string refuse_epilogue(const GemvSpec& spec, const ir::Graph& g,
                            const fusion::Region& consumer, const Target& target = {});
// The parameters: vector width from K's divisibility, rows and unroll from M, the split from
// the tiles; tensor cores (GemvParams::mma) for 2..16 rows of bf16/f16 with K a multiple of 8
// (see gemv.cpp).
GemvParams gemv_params(const GemvSpec& spec, const Target& target);
// The kernel of those parameters as kernel IR (name: kKernelNameToken), and as a KernelBody.
// Launch: params.block threads, any grid (a grid-stride loop over params.work items), arguments
// a (with a prologue: its region's inputs, in order), b, [scale], [bias], [c], d (with an
// epilogue region: its output) in that order;
// with split > 1 launches must not overlap (scratch).
// `wait_in_ring`: with the ring, the block waits for the grid ahead (fj_grid_dependency_wait)
// after it issues its first stages of weights, before it reads A.
kir::Function build_gemv_kernel(const GemvSpec& spec, const GemvParams& params,
                                bool wait_in_ring = false);
// `grid_dependency` (CodegenOptions::grid_dependency): the block first copies its first stages of
// weights into the ring (GemvParams::ring) or, without one, prefetches the first stage of them
// into L2, then waits for the grid ahead.
KernelBody gemv_body(const GemvSpec& spec, const GemvParams& params, bool grid_dependency = false);
// Refuses (InternalError) what refuse_gemv refuses; else the assembled, named kernel.
Kernel generate_gemv(const GemvSpec& spec, const Target& target = {}, bool grid_dependency = false);

}  // namespace fusejit::templates
