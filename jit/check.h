// jit/check: comparing GPU results with the CPU reference, as DESIGN.md's correctness section
// says: ||out - ref|| / ||ref|| on fresh random inputs, with a bound per dtype; NaN never
// passes. Used by `fusejit run --check` and the GPU tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace fusejit::jit {

// Fresh random inputs for every input node of `g`: floats normal(0, 1), integers uniform in
// [-8, 8], bools fair coins.
std::vector<ir::HostTensor> random_inputs(const ir::Graph& g, uint64_t seed);

// The error bound for `g`'s outputs: 1e-2 when any value passes through f16/bf16 storage,
// otherwise 1e-5 (fp32 pointwise, reductions and GEMMs without TF32).
double error_bound(const ir::Graph& g);

// ||out - ref||_2 / ||ref||_2 (or ||out||_2 when ref is all zeros); +inf when out holds a NaN
// that ref does not, or the shapes differ.
double relative_error(const ir::HostTensor& out, const ir::HostTensor& ref);

// Row sampling, for checking large traces (and GEMMs) without running the reference on every
// row. A trace is row-separable when every output's axis 0 is one "row" axis that flows back to
// the inputs without being reduced, permuted, reshaped or contracted: then the reference run on
// a few rows of the row-carrying inputs gives exactly those rows of the outputs.
struct RowSlice {
  ir::Graph graph;                  // the trace with the row axis cut to `rows.size()`
  std::vector<int64_t> rows;        // the sampled row indices, ascending
  std::vector<bool> input_sliced;   // per input: whether its axis 0 is the row axis
};

// The slice of `g` at `count` rows spread evenly over the row axis (always the first and the
// last), or nullopt when `g` is not row-separable.
std::optional<RowSlice> slice_rows(const ir::Graph& g, int64_t count);

// Takes the rows `rows` of axis 0 of `t`.
ir::HostTensor take_rows(const ir::HostTensor& t, const std::vector<int64_t>& rows);

}  // namespace fusejit::jit
