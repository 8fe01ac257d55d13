// jit/check: comparing GPU results with the CPU reference, as docs/design.md's correctness section
// says: ||out - ref|| / ||ref|| on fresh random inputs, with a bound per dtype; NaN never
// passes. Used by `fusejit run --check` and the GPU tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "jit/runtime/executor.h"
#include "jit/runtime/runtime.h"

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

// Sampling, for checking large traces (and GEMMs) without running the reference on all of
// them. A trace is separable along axis `a` of its outputs when that axis flows back to the
// inputs without being reduced, contracted, or merged with other axes by a reshape, through
// any permutes and broadcasts on the way: then the reference run on a few indices of that axis
// of the inputs that carry it gives exactly those indices of the outputs. Axis 0 is the rows
// of a row-wise trace; a transpose carries it to axis 1 of its operand; a column reduction or
// a column softmax is separable along its columns.
struct RowSlice {
  ir::Graph graph;                  // the trace with the sampled axis cut to `rows.size()`
  std::vector<int64_t> rows;        // the sampled indices, ascending
  int64_t output_axis = 0;          // the sampled axis of every output
  std::vector<int64_t> input_axis;  // per input: the axis that carries it, or -1 (taken whole)
};

// The slice of `g` at `count` indices spread evenly over the first output axis (from axis 0) of
// more than `count` elements along which `g` is separable (always the first and the last
// index), or nullopt when there is none.
std::optional<RowSlice> slice_rows(const ir::Graph& g, int64_t count);

// The indices `rows` of axis `axis` of `t`.
ir::HostTensor take_slice(const ir::HostTensor& t, int64_t axis, const std::vector<int64_t>& rows);

// Each input of a slice cut as the slice's graph wants it.
std::vector<ir::HostTensor> slice_inputs(const RowSlice& slice,
                                         const std::vector<ir::HostTensor>& inputs);

// Takes the rows `rows` of axis 0 of `t`.
ir::HostTensor take_rows(const ir::HostTensor& t, const std::vector<int64_t>& rows);

// What comparing a trace's outputs with the CPU reference found.
struct CheckReport {
  std::vector<double> errors;  // per output, relative_error against the reference
  double bound = 0.0;          // error_bound of the trace
  // "every element" or "64 sampled indices of axis 0 (of 16384)".
  std::string scope;
  double reference_seconds = 0.0;  // how long the CPU reference took
  bool passed() const;             // every error within the bound
};

// Compares `got` (the outputs of `g` computed on `inputs`) with the CPU reference. A trace with
// a GEMM or a node of more than `full_elements` elements is compared on `sample_rows` indices
// of an axis it is separable along (slice_rows: the reference on all of a 16384x16384 trace or
// an 8192^3 GEMM would take minutes); otherwise, or when it has no such axis, on every element.
CheckReport check_outputs(const ir::Graph& g, const std::vector<ir::HostTensor>& inputs,
                          std::vector<ir::HostTensor> got, int64_t sample_rows,
                          int64_t full_elements);

// Runs `exe` (planned from `g`) once on `inputs` with every output poisoned with NaN first, so
// that an element a kernel fails to write cannot pass on a stale value, and downloads the
// outputs.
std::vector<ir::HostTensor> run_poisoned(Runtime& runtime, const Executable& exe,
                                         const ir::Graph& g,
                                         const std::vector<std::shared_ptr<DeviceBuffer>>& inputs);

}  // namespace fusejit::jit
