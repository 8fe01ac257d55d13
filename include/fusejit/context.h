// Context: owns the options, the current trace, the device, stream, memory pool and caches.
// Tensors belong to one Context and must not outlive it; a program may create several.
//
// Embedding (docs/api.md, docs/embedding.md): a Context runs on a chosen GPU and on the
// caller's stream (Placement), reads the caller's memory in place (wrap) and writes results into
// it (eval_into, Tensor::data_ptr); fusejit/dlpack.h exchanges tensors with DLPack. "The
// Context's memory" is device memory of its GPU when has_gpu(), host memory on the CPU path,
// so that the same program runs without a GPU.
//
// Threads: a Context may be used from many threads at once. Its state is locked: ops recorded
// from several threads go into one trace, one at a time, and an eval (or to_host, which
// evaluates) computes the tensors it is asked for, whichever thread recorded what they need,
// while the others wait. Threads that should not wait for each other use a Context each. A Tensor
// handle itself is a shared reference: copying and destroying handles from several threads is
// safe; the Context must outlive every thread that uses it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fusejit/dtype.h"
#include "fusejit/export.h"
#include "fusejit/options.h"
#include "fusejit/tensor.h"

// cudaStream_t and cudaEvent_t are pointers to these: a program passes its own without a cast,
// and one that does not use them needs no CUDA header.
struct CUstream_st;
struct CUevent_st;

FUSEJIT_PUBLIC_BEGIN
namespace fusejit {

namespace detail {
struct ContextImpl;
}

// Where a Context's GPU work runs.
struct Placement {
  // The CPU reference interpreter as the device, where a GPU exists too: results as the GPU would
  // give them within fusejit's error bounds, and host memory through DLPack (kDLCPU).
  static constexpr int kCpu = -1;

  // CUDA device ordinal, or kCpu; UsageError when the machine has GPUs but not this one
  int device = 0;
  // The caller's cudaStream_t, on `device`: every copy, kernel and GEMM of the Context is queued
  // on it, in order, so results are ready in stream order (see Tensor::data_ptr). It must outlive
  // the Context and every buffer of it still held (DLPack exports). Null: a stream of fusejit's
  // own. With no GPU (the CPU path) a stream is a UsageError.
  CUstream_st* stream = nullptr;

  // For C++17, which has no designated initializers (C++20's Placement{.device = 0, .stream =
  // s}): Placement::on(0, s). Placement{0, s} works too.
  static Placement on(int device, CUstream_st* stream = nullptr) {
    Placement p;
    p.device = device;
    p.stream = stream;
    return p;
  }
};

class Context {
 public:
  Context();  // options from the environment (Options::from_env)
  explicit Context(Options options);
  Context(Options options, Placement placement);
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
  // Caller memory used in place (zero-copy): `data` holds a tensor of `shape` and `dtype` in the
  // Context's memory (device memory of its GPU; host memory on the CPU path), in the dtype's
  // native format. `strides` (in elements; empty: dense row-major) may describe any layout
  // whose dimensions nest: sorted by stride, each dimension's addressed elements fit between
  // two steps of the next larger stride. That covers a permutation of a dense buffer (a
  // transposed or permuted one), a slice of one with gaps or steps (a column block of a wider
  // matrix: q, k and v of a fused [B, S, 3H] QKV buffer are shape [B, S, H], strides
  // [3SH, 3H, 1] at data + 0, H and 2H elements; every other row: stride 2W for rows of W),
  // both at once (a transposed column block), and stride 0 for broadcast dimensions. They are
  // recorded as reshape, slice, permute and expand views over a dense buffer, so kernels index
  // it in place, and only [data, data + (largest offset + 1) elements) is ever read: the
  // elements past the last addressed one that the dense buffer's last row would hold are
  // padding, never memory. Overlapping or interleaved dimensions (two strides that do not
  // nest) and negative strides throw fusejit::UsageError: make such a buffer contiguous first.
  //
  // Lifetime: fusejit reads `data` at each eval that needs it and never writes it. Keep it
  // alive and unmodified until every result depending on it has been evaluated and, on the GPU,
  // until that work has run (it is queued on the Context's stream: enqueue your own writes
  // after it on the same stream, or call synchronize()). `release`, when given, is called once
  // when fusejit no longer needs the memory (the last tensor reading it is gone) and must not
  // throw. On the GPU, dropping that tensor never blocks: the release is queued behind the work
  // queued so far on the Context's stream and called once that work has run, by the Context's
  // next eval, host copy (to_host), synchronize() or destruction, on the thread making that call
  // (it may call CUDA, e.g. cudaFree). On the CPU path it is called right away, on the thread
  // that drops the tensor. Memory that is not 256-byte aligned is copied into fusejit's
  // own at each eval (kernels and cuBLASLt assume that alignment) instead of read in place; the
  // copies are counted in Stats::inputs_realigned.
  Tensor wrap(const void* data, Shape shape, DType dtype, std::vector<int64_t> strides = {},
              std::function<void()> release = {});

  // Dynamic dims (docs/dynamic-shapes.md): marks axis `axis` of `input`, a tensor holding data
  // (from_vector, from_host, wrap, a result already evaluated), as one whose extent changes
  // between evals: the batch size, the sequence length. Traces that read it are planned once
  // and their kernels take that extent as a runtime argument, so a new size costs no planning
  // and no compile. Without marks, fusejit does the same for the input axes it sees taking a
  // second value (FUSEJIT_DISABLE=dynamic turns both off). `name` names the dim in recorded
  // traces and in `fusejit plan` (default "d<axis>"); axes marked with one name are one dim and
  // must have the same extent. A marked extent of 1 is not made dynamic (it broadcasts). Regions
  // whose kernels cannot take it at run time (a reduction over it, a transpose moving it inward)
  // are compiled per size, as before. Throws fusejit::UsageError for a pending tensor or an
  // axis out of range.
  void mark_dynamic(const Tensor& input, int64_t axis, std::string name = {});

  // The GPU ordinal (-1 on the CPU path) and the stream all work is queued on (null on the CPU
  // path): the caller's, or fusejit's own.
  int device() const;
  CUstream_st* stream() const;
  // Waits until every piece of work queued so far has run (nothing on the CPU path).
  void synchronize();
  // Records `event` (a cudaEvent_t of the Context's GPU) on its stream after the work queued so
  // far, so that another stream can wait for the results (cudaStreamWaitEvent). On the CPU path
  // it does nothing (results are ready when eval returns), so that the same program runs
  // without a GPU.
  void record_event(CUevent_st* event);

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
  // Seed and offset are data (a 16-byte key input of the trace, uploaded at eval), not part of
  // the trace's structure: a new seed each step reuses the plan and kernels of the first.
  // rand: uniform in [0, 1), multiples of 2^-24 (bit-identical on GPU and CPU).
  Tensor rand(Shape shape, uint64_t seed, uint64_t offset = 0, DType dtype = DType::f32);
  // randn: standard normal by Box-Muller (GPU and CPU agree to a few f32 ulps).
  Tensor randn(Shape shape, uint64_t seed, uint64_t offset = 0, DType dtype = DType::f32);
  // The same draws with {seed, offset} as data: `key` is an i64 tensor of shape [2] holding
  // them (each the two's-complement image of the u64), read when the draw runs. A trace that
  // advances its key (update_slice) draws anew at every run of a Replay (fusejit/replay.h).
  // Throws fusejit::UsageError for a key of another dtype, shape or Context.
  Tensor rand(Shape shape, const Tensor& key, DType dtype = DType::f32);
  Tensor randn(Shape shape, const Tensor& key, DType dtype = DType::f32);

  // A stand-in for data: it records like any tensor but holds no values, so a trace can be
  // built and written (trace_text) without allocating inputs. Evaluating a result that depends
  // on a placeholder throws fusejit::Error.
  Tensor placeholder(Shape shape, DType dtype = DType::f32);

  // The trace that computes `outputs` (pending tensors of this Context), in the text format of
  // docs/trace-format.md, holding only the nodes the outputs need.
  std::string trace_text(const std::vector<Tensor>& outputs);

  // Evaluates every pending tensor still held by the program, together (one trace): the one
  // eval that writes more than the tensors named (Tensor::eval).
  void eval_all();

  // Counters of what this Context has done, for tests and tuning.
  struct Stats {
    int64_t traces_evaluated = 0;  // eval calls that computed something
    int64_t outputs_computed = 0;  // tensors materialized by those evals (the ones asked for)
    int64_t plans_built = 0;       // traces planned (a trace-memo hit builds none)
    int64_t trace_memo_hits = 0;
    // Executables made from the plan of a symbolic trace for new sizes (no planning; compiling
    // only the regions that could not take their sizes at run time); see mark_dynamic.
    int64_t dynamic_instances = 0;
    int64_t kernels_compiled = 0;  // NVRTC compiles
    int64_t kernel_cache_hits = 0; // kernels found in the memory or disk cache
    // Entries the bounded in-memory tables forgot, least recently used first: traces dropped
    // from the trace memo (FUSEJIT_MEMO_MAX; planned again if they come back) and loaded
    // kernels dropped from the Context's table (FUSEJIT_KERNELS_MAX; loaded again from the
    // kernel cache if needed).
    int64_t trace_memo_evictions = 0;
    int64_t kernel_evictions = 0;
    // eval_into results copied into their destination instead of written there by the kernel
    // or GEMM that computed them (Tensor::eval_into says when; on the CPU path, every one).
    int64_t outputs_copied = 0;
    // evals whose kernels were replayed as one CUDA graph (docs/api.md, "Launch overhead")
    int64_t graph_launches = 0;
    // Wrapped inputs copied into fusejit's memory at an eval because they were not 256-byte
    // aligned (Context::wrap); one per input per eval. 0 on the CPU path.
    int64_t inputs_realigned = 0;
    // Replay::run calls, and those of them that were one CUDA graph launch (fusejit/replay.h).
    int64_t replay_runs = 0;
    int64_t replay_graph_launches = 0;
  };
  Stats stats() const;

  // Whether eval runs on a GPU (false: the CPU reference runs instead).
  bool has_gpu() const;
  // Whether a Context with Placement::device `device` would run on a GPU, checked as its
  // constructor checks, without creating one: a program decides so whether to pass a stream.
  // False, with the reason in `why` when given, when there is no usable GPU or `device` is not
  // one of this machine's (where a Context with that Placement would throw).
  static bool gpu_available(int device = 0, std::string* why = nullptr);

  detail::ContextImpl& impl() { return *impl_; }

 private:
  std::unique_ptr<detail::ContextImpl> impl_;
};

}  // namespace fusejit
FUSEJIT_PUBLIC_END
