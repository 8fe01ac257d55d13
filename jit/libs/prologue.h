// jit/prologue: which skinny GEMMs compute their A themselves (templates::GemvPrologue), and
// which evaluate the region that reads their D at their store (templates::GemvEpilogue). A
// decode step at batch 1 runs, per layer, an RMS norm before q/k/v and before gate/up, and
// silu(gate) * up before down: each a kernel of a few microseconds that writes A for the GEMM
// kernel right after it to read back. The GEMM kernel can compute those elements as it stages
// A instead, which saves the launch, the write and the read.
//
// This is a step of building an executable (and of `fusejit warm`, which must generate the same
// kernels), not of planning: whether the generated kernel or cuBLASLt runs a GEMM is decided
// there (FUSEJIT_GEMV), and only the generated kernel can take a prologue.
#pragma once

#include <cstddef>
#include <map>

#include "fusion/plan.h"
#include "templates/kernel.h"

namespace fusejit::jit {

// Merges into each gemm region that the skinny-GEMM kernel runs under `codegen` the region just
// before it, where that region computes A and nothing else, nobody else reads A, A is no graph
// output, and templates::refuse_prologue takes it. The merged region keeps its inputs [A, B,
// ...] (A first, as describe_gemm_call reads them; A is then in no region's outputs and has no
// buffer) and adds the producer's inputs and nodes; the producer leaves the plan. A decision
// records each merge, and each producer the kernel refuses (why). Returns the producers by the
// index of the gemm region they merged into, in the plan as it is after. Nothing with
// codegen.gemv_prologue off. Only for static plans: a dynamic plan's regions are kept as planned.
std::map<size_t, fusion::Region> absorb_prologues(fusion::Plan& plan,
                                                  const templates::CodegenOptions& codegen,
                                                  bool allow_tf32);

// The mirror image, at the other end of the GEMM (templates::GemvEpilogue): merges into each gemm
// region that the skinny-GEMM kernel runs under `codegen` the one region that reads its D, where
// nothing else reads D, D is no graph output, and templates::refuse_epilogue takes that region
// (silu(gate) * up after a fused gate/up projection). The merged region's outputs become that
// region's (D then has no buffer: describe_gemm_call's D is the region's output, which the
// kernel writes), its nodes both regions'; the consumer leaves the plan. Decisions as above.
// Returns the consumers by the index of the gemm region they merged into, in the plan as it is
// after. Nothing with codegen.gemv_epilogue off. Only for static plans.
std::map<size_t, fusion::Region> absorb_epilogues(fusion::Plan& plan,
                                                  const templates::CodegenOptions& codegen,
                                                  bool allow_tf32);

// Both, as a run builds its executable (and `fusejit warm` its kernels): epilogue regions first,
// so that a region that both follows one skinny GEMM and feeds another (silu(gate) * up) goes
// into the first one's store; then prologues. Each map by the gemm region's index in the plan as
// it is after both.
struct AbsorbedRegions {
  std::map<size_t, fusion::Region> producers, consumers;
};
AbsorbedRegions absorb_regions(fusion::Plan& plan, const templates::CodegenOptions& codegen,
                               bool allow_tf32);

}  // namespace fusejit::jit
