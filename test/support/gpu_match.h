// The differential check of support/gpu.h as a Catch2 assertion, for the [gpu] tests.
#pragma once

#include <random>

#include "support/catch.h"
#include "support/gpu.h"

namespace fusejit::testing {

// `g` on the GPU, on fresh random inputs, against the CPU reference; the errors, the seed and
// the trace are the failure's message.
inline void require_match(const ir::Graph& g) {
  const GpuCheck c = check_on_gpu(g, std::random_device{}());
  INFO(c.detail);
  CHECK(c.pass);
}

}  // namespace fusejit::testing
