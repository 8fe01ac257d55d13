// Context: owns the options, the current trace, the device, stream, memory pool and caches.
// Tensors belong to one Context and must not outlive it; a program may create several.
//
// Threads: a Context may be used from many threads at once. Its state is locked: ops recorded
// from several threads go into one trace, one at a time, and an eval (or to_host, which
// evaluates) computes every pending tensor of the Context, whichever thread recorded it, while
// the others wait. Threads that should not wait for each other use a Context each. A Tensor
// handle itself is a shared reference: copying and destroying handles from several threads is
// safe; the Context must outlive every thread that uses it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fusejit/dtype.h"
#include "fusejit/options.h"
#include "fusejit/tensor.h"

namespace fusejit {

namespace detail {
struct ContextImpl;
}

class Context {
 public:
  Context();  // options from the environment (Options::from_env)
  explicit Context(Options options);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Options& options() const;

  // A tensor holding a copy of host data. `from_vector` converts the values to `dtype`
  // (rounding to nearest even for f16/bf16); `from_host` copies bytes already in the dtype's
  // native format. Throws fusejit::Error when the element count does not match the shape.
  Tensor from_vector(const std::vector<double>& values, Shape shape, DType dtype = DType::f32);
  Tensor from_vector(const std::vector<float>& values, Shape shape, DType dtype = DType::f32);
  Tensor from_host(const void* data, size_t bytes, Shape shape, DType dtype);
  // A tensor of one value broadcast to `shape` (recorded, not materialized).
  Tensor full(Shape shape, double value, DType dtype = DType::f32);
  // full(shape, 0) and full(shape, 1).
  Tensor zeros(Shape shape, DType dtype = DType::f32);
  Tensor ones(Shape shape, DType dtype = DType::f32);
  // A rank-0 constant.
  Tensor scalar(double value, DType dtype = DType::f32);
  // torch.arange: start, start + step, ... below stop (above it for a negative step), computed
  // from each element's position inside the kernel that reads it (no memory). Float dtypes
  // compute start + i * step in f32, then round to `dtype`; integer dtypes need integral start
  // and step. An empty range or step 0 throws fusejit::UsageError.
  Tensor arange(double start, double stop, double step = 1.0, DType dtype = DType::f32);
  // Random tensors from the counter-based generator Philox-4x32-10 (docs/trace-format.md): each
  // element is a pure function of (seed, offset, its row-major position), so a value never
  // depends on the launch, and the GPU and the CPU reference draw the same numbers. `offset`
  // selects an independent stream under one seed (use a new offset, or seed, per draw). Like
  // `full`, nothing is stored: the numbers are computed inside the kernels that read them.
  // rand: uniform in [0, 1), multiples of 2^-24 (bit-identical on GPU and CPU).
  Tensor rand(Shape shape, uint64_t seed, uint64_t offset = 0, DType dtype = DType::f32);
  // randn: standard normal by Box-Muller (GPU and CPU agree to a few f32 ulps).
  Tensor randn(Shape shape, uint64_t seed, uint64_t offset = 0, DType dtype = DType::f32);

  // A stand-in for data: it records like any tensor but holds no values, so a trace can be
  // built and written (trace_text) without allocating inputs. Evaluating a result that depends
  // on a placeholder throws fusejit::Error.
  Tensor placeholder(Shape shape, DType dtype = DType::f32);

  // The trace that computes `outputs` (pending tensors of this Context), in the text format of
  // docs/trace-format.md, holding only the nodes the outputs need.
  std::string trace_text(const std::vector<Tensor>& outputs);

  // Evaluates every pending tensor still held by the program.
  void eval_all();

  // Counters of what this Context has done, for tests and tuning.
  struct Stats {
    int64_t traces_evaluated = 0;  // eval calls that computed something
    int64_t outputs_computed = 0;  // tensors materialized by those evals
    int64_t plans_built = 0;       // traces planned (a trace-memo hit builds none)
    int64_t trace_memo_hits = 0;
    int64_t kernels_compiled = 0;  // NVRTC compiles
    int64_t kernel_cache_hits = 0; // kernels found in the memory or disk cache
  };
  Stats stats() const;

  // Whether eval runs on a GPU (false: the CPU reference runs instead).
  bool has_gpu() const;

  detail::ContextImpl& impl() { return *impl_; }

 private:
  std::unique_ptr<detail::ContextImpl> impl_;
};

}  // namespace fusejit
