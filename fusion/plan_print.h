// fusion/plan_print: a Plan as JSON (`fusejit plan --json`) and as text (`fusejit plan`,
// FUSEJIT_DUMP=plan and =decisions).
#pragma once

#include <string>

#include "fusion/plan.h"

namespace fusejit::fusion {

// One JSON object, keys in this order: "kernels", "library_calls", "regions" (each: "kind",
// "ops", "inputs", "outputs", "shape", then "reduce_axes" for reduction and normalization
// regions, "epilogue" for gemm regions), "decisions" (each: "producer", "consumer", "fused",
// "reason"). Node ids are strings "%N"; a missing id is null.
std::string plan_to_json(const Plan& plan);

// The regions, one block each, with their nodes as trace lines, then the decisions.
std::string plan_to_text(const Plan& plan);

// One line per decision: "fused %3 -> %4: elementwise chain over [64,256]".
std::string decisions_to_text(const Plan& plan);

}  // namespace fusejit::fusion
