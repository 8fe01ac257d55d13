// Randomly generated graphs of pointwise, broadcast, view and reduction ops, for the
// differential tests (GPU against the CPU reference) and the CI compile tests (every generated
// kernel compiles with NVRTC). The same seed always gives the same graph.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace fusejit::testing {

ir::Graph random_graph(uint64_t seed);

}  // namespace fusejit::testing
