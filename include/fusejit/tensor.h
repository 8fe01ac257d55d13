// The lazy tensor API. Ops on Tensors record nodes into their Context's trace; nothing runs
// until a result is needed (eval, to_host). Shape and dtype errors are thrown when an op is
// recorded, naming the op and the shapes.
//
//   fusejit::Context ctx;
//   auto x = ctx.from_vector(data, {rows, cols});
//   auto y = fusejit::relu(x * w + b);
//   std::vector<double> out = y.to_host();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "fusejit/dtype.h"
#include "fusejit/export.h"

struct DLManagedTensor;  // <dlpack/dlpack.h>: needed only by a program that calls to_dlpack
struct CUstream_st;      // cudaStream_t points to one

FUSEJIT_PUBLIC_BEGIN
namespace fusejit {

class Context;
// Tensor::to_dlpack(stream) with no ordering at all (DLPack's stream -1).
inline CUstream_st* const kNoStreamOrder = reinterpret_cast<CUstream_st*>(~uintptr_t{0});
namespace detail {
struct TensorImpl;
}

class Tensor {
 public:
  Tensor() = default;  // an empty handle; any op on it throws

  const Shape& shape() const;
  DType dtype() const;
  int64_t rank() const { return static_cast<int64_t>(shape().size()); }
  int64_t numel() const;
  Context& context() const;
  bool defined() const { return impl_ != nullptr; }

  // Computes this tensor now, and only it: other pending tensors, held or not (the temporaries
  // of the expression this one was built by too), are not computed or written. One you hold
  // stays pending, and a later eval that needs it computes it from its operands again; to
  // compute several results that share work in one pass, evaluate them together
  // (fusejit::eval({a, b})). An eval reads the Context's inputs as they are then: a wrapped
  // buffer (Context::wrap) and every pending view of it read the caller's memory anew.
  Tensor& eval();
  // Computes if needed and copies the values out, converted to double.
  std::vector<double> to_host() const;
  // Computes if needed and copies the values out in the dtype's native format (f16/bf16 as
  // their 16-bit patterns, bool as bytes); `bytes` must be numel() * dtype_size(dtype()).
  void copy_to_host(void* dst, size_t bytes) const;

  // Computes if needed and returns where the values are, in the Context's memory (a device
  // pointer of its GPU; a host pointer on the CPU path), dense row-major in the dtype's native
  // format. Valid while this tensor (any handle to it) lives. On the GPU the values are ready in
  // stream order: work queued on the Context's stream after this call may read them; other
  // streams wait with Context::record_event, the host with Context::synchronize.
  const void* data_ptr() const;
  // Computes this tensor into caller memory `dst` (the Context's memory), dense row-major at
  // its start: `bytes` is at least numel() * dtype_size(dtype()); bytes past those are left as
  // they are (a buffer sized for the largest batch may take a smaller one). A pending tensor
  // computed by a generated kernel or a GEMM
  // is written there directly when `dst` is 256-byte aligned and overlaps none of the eval's
  // inputs; otherwise (and for a tensor already computed) it is copied there, device to device,
  // on the Context's stream. Afterwards the tensor may read its values from `dst`: keep `dst`
  // alive and unmodified while you use the tensor. Ready in stream order, as data_ptr.
  // `release` (optional) tells when that ends: it is called exactly once, on whichever thread
  // lets go last, when fusejit no longer writes or reads `dst` (the tensor and everything
  // reading it are gone, and the work queued on the Context's stream so far has run), also
  // when eval_into throws; it must not throw or call into fusejit. On the CPU path, and on the
  // GPU when the result was copied rather than written in place, that is as soon as the copy
  // is done.
  void eval_into(void* dst, size_t bytes, std::function<void()> release = {}) const;

  // Computes if needed and exports the values as DLPack (fusejit/dlpack.h): a DLManagedTensor
  // (kDLCUDA on the GPU, kDLCPU on the CPU path, dense, no strides) whose deleter keeps the
  // buffer alive until it is called, also past the Context. The buffer is ready on any stream
  // when this returns (the Context's stream is synchronized). The deleter hands the memory back
  // in the Context's stream order: call it once the consumer's work on the buffer has run, or
  // is ordered before the Context's later work (the same stream).
  DLManagedTensor* to_dlpack() const;
  // The same for a consumer that reads on `stream` (a cudaStream_t of the Context's GPU), as
  // DLPack's __dlpack__(stream=...) protocol asks: the host is not synchronized; `stream` is
  // made to wait for the Context's work queued so far (an event recorded on the Context's stream,
  // waited on there), so the values are ready in `stream`'s order. The Context's own stream
  // needs no wait, nor does the CPU path (ready when this returns). Null: the legacy default
  // stream; as the protocol's "-1", fusejit::kNoStreamOrder orders nothing (the consumer
  // synchronizes itself).
  DLManagedTensor* to_dlpack(CUstream_st* stream) const;

  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<detail::TensorImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<detail::TensorImpl> impl_;
};

// Evaluates several tensors together (they may share one fused kernel).
void eval(const std::vector<Tensor>& tensors);

// A tensor and the caller memory it is computed into (Tensor::eval_into).
struct Destination {
  Tensor tensor;
  void* data = nullptr;
  size_t bytes = 0;
  std::function<void()> release;  // optional: as Tensor::eval_into's
};
// Evaluates several tensors together, each into its destination, as Tensor::eval_into does for
// one. The tensors belong to one Context; the bytes they are written to must not overlap.
void eval_into(const std::vector<Destination>& destinations);

// Elementwise, unary.
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApprox { none, tanh };
Tensor gelu(const Tensor& x, GeluApprox approximate = GeluApprox::none);
Tensor silu(const Tensor& x);
Tensor reciprocal(const Tensor& x);

// Elementwise, binary, with numpy broadcasting and PyTorch type promotion. A scalar operand
// takes the tensor's dtype category, as a Python scalar does in PyTorch.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor cast(const Tensor& x, DType dtype);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& x);

// Reductions over `axes` (negative axes count from the end; empty means all axes).
Tensor sum(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Tensor max(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Tensor min(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);

// Views: index arithmetic inside kernels, never copies. reshape accepts one -1.
Tensor reshape(const Tensor& x, Shape shape);
Tensor permute(const Tensor& x, std::vector<int64_t> perm);
Tensor transpose(const Tensor& x, int64_t axis0, int64_t axis1);
Tensor expand(const Tensor& x, Shape shape);  // -1 keeps a dimension
Tensor squeeze(const Tensor& x, int64_t axis);
Tensor unsqueeze(const Tensor& x, int64_t axis);
// x[start:stop:step] along `axis`, bounds as in Python and PyTorch (negative ones count from the
// end; both clamp to the axis); step >= 1. An empty result throws fusejit::UsageError.
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t stop, int64_t step = 1);
// torch.narrow: `length` elements from `start` (negative counts from the end); must fit.
Tensor narrow(const Tensor& x, int64_t axis, int64_t start, int64_t length);
// torch.chunk: `chunks` slices of ceil(extent / chunks) elements along `axis` (the last may be
// shorter, and there may be fewer), e.g. gate, up = chunk(h, 2, -1) for SwiGLU.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis = 0);
// torch.cat: the tensors joined along `axis`; every other extent must match, dtypes promote. One
// kernel reads all of them: a consumer picks the operand by the position along the axis.
Tensor concat(const std::vector<Tensor>& xs, int64_t axis = 0);

// Matrix product: 2-D, or batched with broadcast batch dimensions.
Tensor matmul(const Tensor& a, const Tensor& b);

// Indexed reads (PyTorch's semantics), computed inside the kernel of what consumes them: the
// index is loaded and the data read where it points. Indices are i32 or i64; a negative index
// counts from the end once (-1 is the last), and an index still outside the axis is clamped to
// its nearest end, on the GPU and the CPU reference alike (docs/trace-format.md, gather).
// torch.gather: result[p] = x[p with p[axis] = index[p]]; index has x's rank and is at most as
// long as x along every other axis; the result has index's shape.
Tensor gather(const Tensor& x, int64_t axis, const Tensor& index);
// In-place write (docs/api.md, "Writing into a buffer"): `value` written into `dst` along `axis`
// from the position `start` holds when the trace runs, as `dst[..., p:p+n, ...] = value` with n
// = value's extent there (a KV-cache append: update_slice(k_cache, 2, pos, rope(k))). dst must
// hold data (from_vector, from_host, wrap, an evaluated result): the write lands in its buffer
// (caller memory included), computed and stored by the kernel that computes `value`, with no
// copy. dst then stands for the written tensor (every handle to it: it is pending until the
// next eval, which performs every write recorded so far) and is returned; ops recorded after
// read the written values. `value` must have dst's dtype and rank and match it on every other
// axis. `start` is one i32 or i64 (shape [] or [1]): data, not part of the trace, so a new
// position needs no planning or compile. A start below 0 counts from the end once, and the
// position is clamped so that the write fits (ir::update_start), on the GPU and the CPU
// reference alike. Throws fusejit::UsageError for a dst that is not data (evaluate it first), a
// value that does not fit, or a start that is not one integer.
Tensor update_slice(Tensor& dst, int64_t axis, const Tensor& start, const Tensor& value);
// torch.index_select: the slices of x at the positions of the 1-D `index` along `axis`.
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index);
// torch.nn.functional.embedding: rows of the 2-D `table` [rows, dim] picked by `ids` (any
// shape); the result is ids.shape + [dim].
Tensor embedding(const Tensor& table, const Tensor& ids);

// Composites, decomposed into the primitives above when recorded. Half-precision inputs are
// computed in f32 and the result cast back, as PyTorch does.
Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);
// Normalizes over the last `normalized_rank` axes; weight and bias may be empty handles.
Tensor layer_norm(const Tensor& x, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5, int64_t normalized_rank = 1);
Tensor rms_norm(const Tensor& x, const Tensor& weight = {}, double eps = 1e-6,
                int64_t normalized_rank = 1);
Tensor var(const Tensor& x, std::vector<int64_t> axes = {}, double correction = 1.0,
           bool keepdim = false);
// x @ weight^T + bias, with weight [out_features, in_features] (PyTorch's convention).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// x + value * a * b
Tensor addcmul(const Tensor& x, const Tensor& a, const Tensor& b, double value = 1.0);
// min(max(x, lo), hi), either bound optional (torch.clamp): maximum and minimum with scalars of
// x's dtype category, so NaN in x stays NaN. Throws fusejit::UsageError when lo > hi or neither
// bound is given.
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi);
// torch.argmax along `axis`: the position (i64) of the largest value, the first one among
// equals; NaN counts as the largest (as in torch). One row kernel: the max, then the position.
Tensor argmax(const Tensor& x, int64_t axis = -1, bool keepdim = false);
// A draw from softmax(logits / temperature) along `axis`, as i64 positions, one per row: the
// Gumbel-max trick, argmax(logits / temperature - log(-log(u))) with u = Context::rand(shape,
// seed, offset), so a draw is a pure function of (seed, offset, position) and the same on the
// GPU and the CPU reference; use a new offset (or seed) per step. temperature 0 is argmax.
// Throws fusejit::UsageError for integer logits or a temperature that is negative or not
// finite.
Tensor sample(const Tensor& logits, double temperature, uint64_t seed, uint64_t offset = 0,
              int64_t axis = -1);
// The same with {seed, offset} as data, an i64 tensor of shape [2] (Context::rand(shape, key)).
Tensor sample(const Tensor& logits, double temperature, const Tensor& key, int64_t axis = -1);
// Logit filters for sampling, along the last axis, each a few kernels (a threshold search
// of 4 rounds of 256 candidates, two kernels a round, then the filter): the logits kept as they
// are, the others -inf, so that sample() draws among the kept ones. top_k_filter keeps every logit
// at or above the row's k-th largest (ties with it included); top_p_filter keeps the smallest set
// of largest logits whose softmax probability reaches p (nucleus sampling; apply the temperature
// first, as logits / t). k >= the vocabulary and p = 1 keep everything. Throws
// fusejit::UsageError for integer logits, k < 1 or p outside (0, 1].
Tensor top_k_filter(const Tensor& logits, int64_t k);
Tensor top_p_filter(const Tensor& logits, double p);
// torch.nn.functional.dropout in training mode: each element kept with probability 1 - p and
// scaled by 1 / (1 - p), the others 0. The mask is rand(x.shape, seed, offset) < 1 - p (see
// Context::rand): the same (seed, offset) gives the same mask, on the GPU and the CPU
// reference. p = 0 returns x; p = 1 returns x * 0 (as torch). x must be floating-point; throws
// fusejit::UsageError for p outside [0, 1].
Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset = 0);

}  // namespace fusejit
FUSEJIT_PUBLIC_END
