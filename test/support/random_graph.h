// Randomly generated graphs of pointwise, broadcast, view and reduction ops, for the
// differential tests (GPU against the CPU reference) and the CI compile tests (every generated
// kernel compiles with NVRTC). The same seed always gives the same graph.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace fusejit::testing {

// `narrow`: f32, bf16 and f16 graphs of rank 1 to 3 (what the older tests were tuned on).
// `wide`: also i32 and i64 graphs (only ops exact on small integers), rank up to 4, single-axis
// reductions over any axis, and bool outputs (comparisons); the 1,000+ graph GPU test.
enum class RandomGraphs { narrow, wide };

ir::Graph random_graph(uint64_t seed, RandomGraphs kind = RandomGraphs::narrow);

}  // namespace fusejit::testing
