// jit/plan_text: the text `fusejit plan` prints for a plan: its regions and decisions
// (fusion/plan_print.h), then how each gemm region is issued to cuBLASLt. The CLI prints it for a
// trace file, fusejit::plan_text (fusejit/profile.h) for a Context's pending tensors; both call
// this, so the two never drift apart.
#pragma once

#include <string>

#include "fusejit/options.h"
#include "fusion/plan.h"

namespace fusejit::jit {

// plan_to_text(plan), then "library calls:" with one line per gemm region (its cuBLASLt call
// and, when batched, the batch strides in elements; 0: that operand is broadcast), when any.
// Each gemm region the skinny-GEMM kernel takes under `gemv` (Options::gemv) says so, with its
// parameters; with GemvMode::on each other one says why not. With `prologue`
// (Options::gemv_prologue), one that computes its A from the region before it says so
// (jit/libs/prologue.h): that region is then no kernel of its own. `ring` (Options::gemv_ring):
// whether the kernel's parameters may stream the weights through shared memory. With `epilogue`
// (Options::gemv_epilogue), one that evaluates the region reading its D at its store says so:
// that region is then no kernel of its own either.
std::string plan_text(const fusion::Plan& plan, bool allow_tf32, GemvMode gemv = GemvMode::large,
                      bool prologue = false, bool ring = false, bool epilogue = false);

}  // namespace fusejit::jit
