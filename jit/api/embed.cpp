// jit/embed: what a program that owns its GPU memory and stream uses (fusejit/context.h's
// "Embedding"): wrapping caller memory, computing into it, reading a result's address, and the
// Context's device and stream. DLPack sits on top of these, in jit/api/dlpack.cpp.
//
// Strides are not an IR concept: a wrapped layout whose dimensions nest (each one's addressed
// elements fit between two steps of the next larger stride), with broadcast (stride 0)
// dimensions, is recorded as reshape, slice, permute and expand over a dense buffer, which
// kernels already index in place. Anything else (overlaps, interleaving, negative strides) is
// refused.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusejit/context.h"
#include "fusejit/error.h"
#include "ir/shape.h"
#include "jit/api/context_impl.h"
#include "jit/runtime/cuda_check.h"

namespace fusejit {

namespace {

using detail::byte_size;

// How a strided layout maps onto views of a dense buffer. The layout's real dims (size > 1, not
// broadcast), by decreasing stride, are the dims of a dense `base` whose extents may exceed the
// layout's: a dim with stride s gets the base stride g (the gcd of its own stride and every
// larger one, 1 for the innermost) and is sliced [0, step * (n - 1) + 1) with step s / g. Then
// permute puts them back in the layout's order, and broadcast dims are expanded.
struct DenseView {
  struct Slice {
    int64_t axis, stop, step;
  };
  Shape base;                 // outermost first; its row-major strides are the g's
  std::vector<Slice> slices;  // on base, where a dim has a gap or a step
  std::vector<int64_t> perm;  // permute(sliced base, perm): the real dims in the layout's order
  Shape squeezed;             // the layout's shape with its broadcast dims as 1
  bool broadcast = false;
  int64_t span = 1;  // elements from the first to the last addressed one, inclusive
  int64_t tail = 0;  // base elements past the span (the rest of the base's last row)
};

// Fills v.base, v.slices, v.span and v.tail for the real dims `order` (outermost first);
// returns the first dim whose elements do not fit under the next larger stride, or -1.
int64_t nest(DenseView& v, const Shape& shape, const std::vector<int64_t>& strides,
             const std::vector<size_t>& order) {
  const size_t n = order.size();
  std::vector<int64_t> g(n);  // each real dim's stride in the base
  for (size_t j = 0; j < n; ++j) {
    g[j] = std::gcd(j ? g[j - 1] : 0, strides[order[j]]);
  }
  if (n) g[n - 1] = 1;
  v.base.assign(n, 0);
  for (size_t j = n; j-- > 0;) {
    const size_t d = order[j];
    const int64_t step = strides[d] / g[j];
    const int64_t stop = step * (shape[d] - 1) + 1;  // base extent the dim addresses
    const int64_t extent = j ? g[j - 1] / g[j] : stop;
    if (extent < stop) return static_cast<int64_t>(d);
    v.base[j] = extent;
    if (extent != stop || step != 1) v.slices.push_back({static_cast<int64_t>(j), stop, step});
    v.span += strides[d] * (shape[d] - 1);
  }
  v.tail = ir::numel(v.base) - v.span;
  return -1;
}

DenseView dense_view(const Shape& shape, const std::vector<int64_t>& strides, DType dtype) {
  const auto refuse = [&](std::string_view why) {
    return UsageError(
        fmt::format("wrap: strides [{}] of {}{} {}; fusejit reads layouts whose "
                    "dimensions nest (permuted, e.g. transposed, or sliced dense "
                    "buffers) and stride-0 broadcasts in place. Make the buffer "
                    "contiguous first (torch: .contiguous())",
                    fmt::join(strides, ", "), dtype_name(dtype), ir::shape_str(shape), why));
  };
  DenseView v;
  v.squeezed = shape;
  std::vector<size_t> real;  // dims of size > 1 that are not broadcast
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (strides[i] < 0) throw refuse("include a negative stride");
    if (strides[i] == 0) {
      v.broadcast = true;
      v.squeezed[i] = 1;
    } else {
      real.push_back(i);
    }
  }
  int64_t reach = 0;  // bounds every offset, the span and the dense base's size
  for (size_t d : real) {
    const std::optional<int64_t> dim_reach = ir::checked_mul(strides[d], shape[d]);
    if (!dim_reach || __builtin_add_overflow(reach, *dim_reach, &reach)) {
      throw refuse("address past 2^63 elements");
    }
  }
  std::vector<size_t> order = real;  // outermost (largest stride) first
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  if (const int64_t d = nest(v, shape, strides, order); d >= 0) {
    throw refuse(
        fmt::format("overlap or interleave: dimension {}'s {} elements of stride {} do "
                    "not fit under the next larger stride",
                    d, shape[static_cast<size_t>(d)], strides[static_cast<size_t>(d)]));
  }
  for (size_t d : real) {
    v.perm.push_back(std::find(order.begin(), order.end(), d) - order.begin());
  }
  return v;
}

// The tensor of `shape` that views `stored` (the dense base, or its first v.span elements) as
// `v` says. The padding past the span is never read: the slices skip it.
Tensor view_of(Context& ctx, const Tensor& stored, const Shape& shape, const DenseView& v) {
  Tensor t = stored;
  if (v.tail > 0) {
    t = reshape(concat({t, ctx.zeros({v.tail}, t.dtype())}, 0), v.base);
  }
  for (const DenseView::Slice& s : v.slices) t = slice(t, s.axis, 0, s.stop, s.step);
  std::vector<int64_t> identity(v.perm.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (v.perm != identity) t = permute(t, v.perm);
  if (t.shape() != v.squeezed) t = reshape(t, v.squeezed);
  if (v.broadcast) t = expand(t, shape);
  return t;
}

}  // namespace

Tensor Context::wrap(const void* data, Shape shape, DType dtype, std::vector<int64_t> strides,
                     std::function<void()> release) {
  const std::lock_guard<detail::ContextMutex> lock(impl_->mutex);
  if (!data) throw UsageError("wrap: the data pointer is null; pass the address of the buffer");
  detail::check_dims(shape, "wrap");
  ir::check_tensor_size(shape, dtype, "wrap");
  if (strides.empty()) {
    strides.assign(shape.size(), 0);
    int64_t step = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      strides[i] = step;
      step *= shape[i];
    }
  }
  if (strides.size() != shape.size()) {
    throw UsageError(
        fmt::format("wrap: {} strides given for shape {} of rank {}; give one stride "
                    "(in elements) per dimension, or none for a dense buffer",
                    strides.size(), ir::shape_str(shape), shape.size()));
  }
  const DenseView v = dense_view(shape, strides, dtype);
  // The memory read is exactly the addressed span: the dense base itself, or, when the base's
  // last row reaches past the last addressed element, the span alone (view_of pads it).
  const Shape stored = v.tail > 0 ? Shape{v.span} : v.base;
  const size_t bytes = byte_size(stored, dtype);
  auto storage = std::make_shared<detail::Storage>();
  storage->host.dtype = dtype;
  storage->host.shape = stored;
  if (impl_->runtime) {
    impl_->runtime->require_device_pointer(data, "wrap");
    storage->device =
        impl_->runtime->device().borrow(const_cast<void*>(data), bytes, std::move(release));
  } else {
    storage->borrowed_host = std::make_unique<detail::HostBorrow>(data, bytes, std::move(release));
  }
  auto base = std::make_shared<detail::TensorImpl>();
  base->ctx = impl_.get();
  base->dtype = dtype;
  base->shape = stored;
  base->storage = std::move(storage);
  return view_of(*this, Tensor(std::move(base)), shape, v);
}

int Context::device() const {
  return impl_->runtime ? impl_->runtime->device().info().ordinal : -1;
}

CUstream_st* Context::stream() const {
  return impl_->runtime ? impl_->runtime->device().stream() : nullptr;
}

void Context::synchronize() {
  const std::lock_guard<detail::ContextMutex> lock(impl_->mutex);
  if (impl_->runtime) impl_->runtime->device().synchronize();
}

void Context::record_event(CUevent_st* event) {
  const std::lock_guard<detail::ContextMutex> lock(impl_->mutex);
  if (!impl_->runtime) return;  // the CPU path: results are ready when eval returns
  if (!event) throw UsageError("record_event: the event is null; create one with cudaEventCreate");
  const jit::DeviceGuard guard(device());
  FUSEJIT_CUDA(cudaEventRecord(event, impl_->runtime->device().stream()));
}

const void* Tensor::data_ptr() const {
  if (!defined()) throw UsageError("data_ptr: the Tensor handle is empty (default-constructed)");
  detail::TensorImpl& t = *impl();
  const std::lock_guard<detail::ContextMutex> lock(t.ctx->mutex);
  if (!t.storage) t.ctx->eval({impl()});
  return t.ctx->data_of(*t.storage);
}

void Tensor::eval_into(void* dst, size_t bytes, std::function<void()> release) const {
  fusejit::eval_into({Destination{*this, dst, bytes, std::move(release)}});
}

namespace {

// A destination's release, called when its last holder lets go: the eval_into call, the buffer
// borrowed for the kernel that writes the destination (the result's storage, while it lives),
// and on the GPU one more borrow let go at once, whose release waits behind the work queued.
class ReleaseOnce {
 public:
  explicit ReleaseOnce(std::function<void()> release) : release_(std::move(release)) {}
  ReleaseOnce(const ReleaseOnce&) = delete;
  ReleaseOnce& operator=(const ReleaseOnce&) = delete;
  ~ReleaseOnce() { release_(); }

 private:
  std::function<void()> release_;
};

// A release that lets go of `token` (empty without one).
std::function<void()> holding(const std::shared_ptr<ReleaseOnce>& token) {
  if (!token) return {};
  return [held = token]() mutable { held.reset(); };
}

// The bytes of a destination the result is written to: the first numel * dtype size.
size_t written_bytes(const Destination& d) {
  return byte_size(d.tensor.shape(), d.tensor.dtype());
}

void check_destination(const Destination& d, detail::ContextImpl& ctx) {
  if (!d.tensor.defined()) throw UsageError("eval_into: a destination's tensor is empty");
  if (d.tensor.impl()->ctx != &ctx) {
    throw UsageError(
        "eval_into: the tensors belong to different Contexts; evaluate each "
        "Context's tensors separately");
  }
  if (!d.data) throw UsageError("eval_into: the destination pointer is null");
  const size_t want = written_bytes(d);
  if (d.bytes < want) {
    throw UsageError(
        fmt::format("eval_into: the destination holds {} bytes but the tensor {}{} "
                    "needs {}; pass a buffer of at least that size",
                    d.bytes, dtype_name(d.tensor.dtype()), ir::shape_str(d.tensor.shape()), want));
  }
  if (ctx.runtime) ctx.runtime->require_device_pointer(d.data, "eval_into");
}

bool overlap(const Destination& a, const Destination& b) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a.data);
  const auto pb = reinterpret_cast<std::uintptr_t>(b.data);
  return pa < pb + written_bytes(b) && pb < pa + written_bytes(a);
}

}  // namespace

void eval_into(const std::vector<Destination>& destinations) {
  // Made first, so that every release is called, whatever throws below; the last are let go
  // when this returns, after the Context's lock.
  std::vector<std::shared_ptr<ReleaseOnce>> tokens;
  tokens.reserve(destinations.size());
  for (const Destination& d : destinations) {
    tokens.push_back(d.release ? std::make_shared<ReleaseOnce>(d.release) : nullptr);
  }
  if (destinations.empty()) return;
  if (!destinations.front().tensor.defined()) {
    throw UsageError("eval_into: a destination's tensor is empty");
  }
  detail::ContextImpl& ctx = *destinations.front().tensor.impl()->ctx;
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  for (size_t i = 0; i < destinations.size(); ++i) {
    check_destination(destinations[i], ctx);
    for (size_t j = 0; j < i; ++j) {
      if (overlap(destinations[i], destinations[j])) {
        throw UsageError(
            fmt::format("eval_into: destinations {} and {} overlap; give each tensor "
                        "its own buffer",
                        j, i));
      }
    }
  }
  // On the GPU the writes are queued work: each release also waits behind what was queued by
  // the time this returns or throws (a borrowed buffer let go queues its release on the stream).
  // A refused call (above) queued nothing: its releases are called at once.
  struct QueueBehind {
    detail::ContextImpl& ctx;
    const std::vector<Destination>& destinations;
    const std::vector<std::shared_ptr<ReleaseOnce>>& tokens;
    ~QueueBehind() {
      if (!ctx.runtime) return;
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (!tokens[i]) continue;
        try {
          ctx.runtime->device().borrow(destinations[i].data, 0, holding(tokens[i]));
        } catch (...) {  // out of host memory: the release then waits for nothing more
        }
      }
    }
  } queue_behind{ctx, destinations, tokens};
  // Pending tensors are computed into their destinations; computed ones are copied there.
  std::vector<std::shared_ptr<detail::TensorImpl>> pending;
  std::vector<const Destination*> computed;
  detail::ContextImpl::Into into;
  for (size_t i = 0; i < destinations.size(); ++i) {
    const Destination& d = destinations[i];
    if (d.tensor.impl()->storage) {
      computed.push_back(&d);
    } else if (into.emplace(d.tensor.impl().get(),
                            detail::ContextImpl::IntoBuffer{d.data, holding(tokens[i])})
                   .second) {
      pending.push_back(d.tensor.impl());
    } else {
      computed.push_back(&d);  // the same tensor twice: the second gets a copy
    }
  }
  if (!pending.empty()) ctx.eval(pending, into);
  for (const Destination* d : computed) {
    ++ctx.stats.outputs_copied;
    const void* src = ctx.data_of(*d->tensor.impl()->storage);
    if (ctx.runtime) {
      ctx.runtime->copy(d->data, src, written_bytes(*d));
    } else {
      std::memmove(d->data, src, written_bytes(*d));
    }
  }
}

}  // namespace fusejit
