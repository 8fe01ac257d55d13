// fusion/plan_print: a Plan as JSON (`fusejit plan --json`) and as text (`fusejit plan`,
// FUSEJIT_DUMP=plan and =decisions).
#pragma once

#include <string>

#include "fusion/plan.h"

namespace fusejit::fusion {

// plan_json's document on one line (json_line, fusion/plan_json.h), ending in a newline.
std::string plan_to_json(const Plan& plan);

// The regions, one block each, with their nodes as trace lines, then the decisions.
std::string plan_to_text(const Plan& plan);

// One line per decision: "fused %3 -> %4: elementwise chain over [64,256]".
std::string decisions_to_text(const Plan& plan);

}  // namespace fusejit::fusion
