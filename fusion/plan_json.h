// fusion/plan_json: a Plan as one JSON document, built with nlohmann-json (`fusejit plan --json`
// and FUSEJIT_DUMP's plan_to_json, fusion/plan_print.h). Only the .cpp files that build or extend
// the document include this header; the rest of fusion knows nothing of nlohmann-json.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "fusion/plan.h"

namespace fusejit::fusion {

// One JSON object, keys in this order: "kernels", "library_calls", "regions" (each: "kind",
// "ops", "inputs", "outputs", "shape", then "reduce_axes" and "welford" for reduction and
// normalization regions, "epilogue" for gemm regions, "attention" for attention regions),
// "decisions" (each: "producer", "consumer", "fused", "reason"). Node ids are strings "%N"; a
// missing id is null. A number that is not finite is null, except an attention fill of
// infinity, "inf" or "-inf".
nlohmann::ordered_json plan_json(const Plan& plan);

// `doc` on one line, without a newline: bytes of a string that are not UTF-8 are written as
// U+FFFD; control characters as JSON's short escapes where it has them, else \u00XX.
std::string json_line(const nlohmann::ordered_json& doc);

}  // namespace fusejit::fusion
