// jit/tensor: Tensor handles and the primitive ops, each recording one node (views and
// reductions may record a reshape too).
#include <mutex>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "fusejit/context.h"
#include "fusejit/error.h"
#include "ir/shape.h"
#include "jit/api/context_impl.h"

namespace fusejit {

using detail::TensorImpl;
using ir::Op;

namespace {

TensorImpl& impl_of(const Tensor& t, std::string_view op) {
  if (!t.defined()) {
    throw UsageError(fmt::format("{}: an operand is an empty Tensor handle (default-constructed); "
                            "create tensors through a Context",
                            op));
  }
  return *t.impl();
}

const std::shared_ptr<TensorImpl>& impl_ptr(const Tensor& t, std::string_view op) {
  impl_of(t, op);
  return t.impl();
}

detail::ContextImpl& ctx_of(const Tensor& t, std::string_view op) { return *impl_of(t, op).ctx; }

Tensor record(detail::ContextImpl& ctx, ir::NodeSpec spec) {
  return Tensor(ctx.record(std::move(spec)));
}

Tensor unary(Op op, const Tensor& x) {
  auto& ctx = ctx_of(x, ir::op_name(op));
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  return Tensor(ctx.record(op, {ctx.node_of(impl_ptr(x, ir::op_name(op)))}));
}

Tensor binary(Op op, const Tensor& a, const Tensor& b) {
  const std::string_view name = ir::op_name(op);
  auto& ctx = ctx_of(a, name);
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  const ir::NodeId ia = ctx.node_of(impl_ptr(a, name));
  const ir::NodeId ib = ctx.node_of(impl_ptr(b, name));
  return Tensor(ctx.record(op, {ia, ib}));
}

// A scalar operand takes the tensor's category, as a Python scalar does in PyTorch: a float
// tensor keeps its dtype; an integer tensor stays integer for an integral scalar and becomes
// f32 otherwise; a bool tensor becomes i64 or f32.
DType scalar_dtype(const Tensor& t, double v) {
  const bool integral_value = std::isfinite(v) && std::trunc(v) == v;
  if (is_floating(t.dtype())) return t.dtype();
  if (is_integral(t.dtype())) return integral_value ? t.dtype() : DType::f32;
  return integral_value ? DType::i64 : DType::f32;
}

Tensor scalar_like(const Tensor& t, double v) {
  return t.context().scalar(v, scalar_dtype(t, v));
}

Tensor reduce(Op op, const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  const std::string_view name = ir::op_name(op);
  auto& ctx = ctx_of(x, name);
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  if (axes.empty()) {
    for (int64_t i = 0; i < x.rank(); ++i) axes.push_back(i);
  }
  if (axes.empty()) return x;  // a rank-0 tensor: nothing to reduce
  return record(ctx, {.op = op, .inputs = {ctx.node_of(impl_ptr(x, name))}, .axes = std::move(axes),
                      .keepdim = keepdim});
}

}  // namespace

const Shape& Tensor::shape() const {
  auto& t = impl_of(*this, "shape");
  const std::lock_guard<detail::ContextMutex> lock(t.ctx->mutex);
  return t.ctx->shape_of(t);
}
DType Tensor::dtype() const { return impl_of(*this, "dtype").dtype; }
int64_t Tensor::numel() const { return ir::numel(shape()); }

Context& Tensor::context() const {
  // The Context owns its impl; the impl keeps a back pointer to the Context object.
  return *impl_of(*this, "context").ctx->owner;
}

Tensor& Tensor::eval() {
  auto& t = impl_of(*this, "eval");
  const std::lock_guard<detail::ContextMutex> lock(t.ctx->mutex);
  if (!t.storage) t.ctx->eval({impl_});
  return *this;
}

std::vector<double> Tensor::to_host() const {
  auto& t = impl_of(*this, "to_host");
  const std::lock_guard<detail::ContextMutex> lock(t.ctx->mutex);
  if (!t.storage) t.ctx->eval({impl_});
  const ir::HostTensor& h = t.ctx->host_of(*t.storage);
  std::vector<double> out(static_cast<size_t>(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i) out[static_cast<size_t>(i)] = h.get(i);
  return out;
}

void Tensor::copy_to_host(void* dst, size_t bytes) const {
  auto& t = impl_of(*this, "copy_to_host");
  const size_t want = detail::byte_size(shape(), dtype());
  if (bytes != want) {
    throw UsageError(fmt::format("copy_to_host: the destination holds {} bytes but the tensor {}{} "
                            "needs {}",
                            bytes, dtype_name(dtype()), ir::shape_str(shape()), want));
  }
  const std::lock_guard<detail::ContextMutex> lock(t.ctx->mutex);
  if (!t.storage) t.ctx->eval({impl_});
  std::memcpy(dst, t.ctx->host_of(*t.storage).bytes.data(), bytes);
}

void eval(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return;
  std::vector<std::shared_ptr<TensorImpl>> impls;
  for (const Tensor& t : tensors) {
    if (impl_of(t, "eval").ctx != tensors.front().impl()->ctx) {
      throw UsageError("eval: the tensors belong to different Contexts; evaluate each Context's "
                  "tensors separately");
    }
    impls.push_back(t.impl());
  }
  const std::lock_guard<detail::ContextMutex> lock(impls.front()->ctx->mutex);
  impls.front()->ctx->eval(impls);
}

Tensor neg(const Tensor& x) { return unary(Op::neg, x); }
Tensor abs(const Tensor& x) { return unary(Op::abs, x); }
Tensor exp(const Tensor& x) { return unary(Op::exp, x); }
Tensor log(const Tensor& x) { return unary(Op::log, x); }
Tensor sqrt(const Tensor& x) { return unary(Op::sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary(Op::rsqrt, x); }
Tensor sin(const Tensor& x) { return unary(Op::sin, x); }
Tensor cos(const Tensor& x) { return unary(Op::cos, x); }
Tensor tanh(const Tensor& x) { return unary(Op::tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(Op::sigmoid, x); }
Tensor relu(const Tensor& x) { return unary(Op::relu, x); }
Tensor gelu(const Tensor& x, GeluApprox approximate) {
  return unary(approximate == GeluApprox::tanh ? Op::gelu_tanh : Op::gelu, x);
}
Tensor silu(const Tensor& x) { return unary(Op::silu, x); }
Tensor reciprocal(const Tensor& x) { return unary(Op::reciprocal, x); }

Tensor add(const Tensor& a, const Tensor& b) { return binary(Op::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(Op::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(Op::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(Op::div, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(Op::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(Op::minimum, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(Op::pow, a, b); }
Tensor pow(const Tensor& a, double exponent) { return pow(a, scalar_like(a, exponent)); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(Op::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(Op::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(Op::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(Op::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(Op::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(Op::ge, a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  auto& ctx = ctx_of(cond, "where");
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  const ir::NodeId c = ctx.node_of(impl_ptr(cond, "where"));
  const ir::NodeId ia = ctx.node_of(impl_ptr(a, "where"));
  const ir::NodeId ib = ctx.node_of(impl_ptr(b, "where"));
  return Tensor(ctx.record(Op::where, {c, ia, ib}));
}

Tensor cast(const Tensor& x, DType dtype) {
  auto& ctx = ctx_of(x, "cast");
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  return record(ctx, {.op = Op::cast, .inputs = {ctx.node_of(impl_ptr(x, "cast"))}, .dtype = dtype});
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, scalar_like(a, b)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_like(a, b)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_like(a, b)); }
Tensor operator/(const Tensor& a, double b) { return div(a, scalar_like(a, b)); }
Tensor operator+(double a, const Tensor& b) { return add(scalar_like(b, a), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_like(b, a), b); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_like(b, a), b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_like(b, a), b); }
Tensor operator-(const Tensor& x) { return neg(x); }

Tensor sum(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return reduce(Op::sum, x, std::move(axes), keepdim);
}
Tensor mean(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return reduce(Op::mean, x, std::move(axes), keepdim);
}
Tensor max(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return reduce(Op::max, x, std::move(axes), keepdim);
}
Tensor min(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return reduce(Op::min, x, std::move(axes), keepdim);
}

Tensor reshape(const Tensor& x, Shape shape) {
  // Resolve one -1 from the element count.
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer_at >= 0) throw UsageError("reshape: only one dimension may be -1");
      infer_at = static_cast<int64_t>(i);
    } else {
      // An overflowing product is as impossible to infer from as a zero one.
      known = ir::checked_mul(known, shape[i]).value_or(0);
    }
  }
  if (infer_at >= 0) {
    if (known <= 0 || x.numel() % known != 0) {
      throw UsageError(fmt::format("reshape: cannot infer the -1 in {} for {}{} ({} elements)",
                              ir::shape_str(shape), dtype_name(x.dtype()), ir::shape_str(x.shape()),
                              x.numel()));
    }
    shape[static_cast<size_t>(infer_at)] = x.numel() / known;
  }
  auto& ctx = ctx_of(x, "reshape");
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  return record(ctx, {.op = Op::reshape, .inputs = {ctx.node_of(impl_ptr(x, "reshape"))},
                      .shape = std::move(shape)});
}

Tensor permute(const Tensor& x, std::vector<int64_t> perm) {
  auto& ctx = ctx_of(x, "permute");
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  return record(ctx, {.op = Op::permute, .inputs = {ctx.node_of(impl_ptr(x, "permute"))},
                      .axes = std::move(perm)});
}

Tensor transpose(const Tensor& x, int64_t axis0, int64_t axis1) {
  const int64_t rank = x.rank();
  const int64_t a = ir::normalize_axis(axis0, rank, "transpose");
  const int64_t b = ir::normalize_axis(axis1, rank, "transpose");
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) perm[static_cast<size_t>(i)] = i;
  std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
  return permute(x, std::move(perm));
}

Tensor expand(const Tensor& x, Shape shape) {
  const size_t off = shape.size() >= x.shape().size() ? shape.size() - x.shape().size() : 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (i < off) {
        throw UsageError(fmt::format("expand: -1 at dimension {} of {} has no matching dimension in "
                                "{}{}",
                                i, ir::shape_str(shape), dtype_name(x.dtype()),
                                ir::shape_str(x.shape())));
      }
      shape[i] = x.shape()[i - off];
    }
  }
  auto& ctx = ctx_of(x, "expand");
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  return record(ctx, {.op = Op::expand, .inputs = {ctx.node_of(impl_ptr(x, "expand"))},
                      .shape = std::move(shape)});
}

Tensor squeeze(const Tensor& x, int64_t axis) {
  const int64_t a = ir::normalize_axis(axis, x.rank(), "squeeze");
  if (x.shape()[static_cast<size_t>(a)] != 1) {
    throw UsageError(fmt::format("squeeze: dimension {} of {}{} is {}, not 1", axis,
                            dtype_name(x.dtype()), ir::shape_str(x.shape()),
                            x.shape()[static_cast<size_t>(a)]));
  }
  Shape s = x.shape();
  s.erase(s.begin() + a);
  return reshape(x, std::move(s));
}

Tensor unsqueeze(const Tensor& x, int64_t axis) {
  const int64_t a = ir::normalize_axis(axis, x.rank() + 1, "unsqueeze");
  Shape s = x.shape();
  s.insert(s.begin() + a, 1);
  return reshape(x, std::move(s));
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t stop, int64_t step) {
  auto& ctx = ctx_of(x, "slice");
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  const ir::NodeId id = ctx.node_of(impl_ptr(x, "slice"));
  return record(ctx, ir::slice_spec(ctx.trace, id, axis, start, stop, step));
}

Tensor narrow(const Tensor& x, int64_t axis, int64_t start, int64_t length) {
  const int64_t a = ir::normalize_axis(axis, x.rank(), "narrow");
  const int64_t extent = x.shape()[static_cast<size_t>(a)];
  const int64_t first = start < 0 ? start + extent : start;
  if (first < 0 || first >= extent || length < 1 || length > extent - first) {
    throw UsageError(fmt::format("narrow: {} elements from {} do not fit axis {} of {}{} (extent "
                                 "{})",
                                 length, start, axis, dtype_name(x.dtype()),
                                 ir::shape_str(x.shape()), extent));
  }
  return slice(x, a, first, first + length);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis) {
  const int64_t a = ir::normalize_axis(axis, x.rank(), "chunk");
  if (chunks < 1) {
    throw UsageError(fmt::format("chunk: {} chunks; ask for at least 1", chunks));
  }
  const int64_t extent = x.shape()[static_cast<size_t>(a)];
  const int64_t size = 1 + (extent - 1) / chunks;  // ceil(extent / chunks), without overflow
  std::vector<Tensor> out;
  for (int64_t first = 0; first < extent; first += size) {
    out.push_back(slice(x, a, first, first + size));
  }
  return out;
}

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  if (xs.empty()) throw UsageError("concat: no tensors given; pass at least one");
  auto& ctx = ctx_of(xs.front(), "concat");
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  std::vector<ir::NodeId> ids;
  for (const Tensor& x : xs) ids.push_back(ctx.node_of(impl_ptr(x, "concat")));
  return record(ctx, {.op = Op::concat, .inputs = std::move(ids), .axes = {axis}});
}

Tensor matmul(const Tensor& a, const Tensor& b) { return binary(Op::matmul, a, b); }

Tensor gather(const Tensor& x, int64_t axis, const Tensor& index) {
  auto& ctx = ctx_of(x, "gather");
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  const ir::NodeId ix = ctx.node_of(impl_ptr(x, "gather"));
  const ir::NodeId ii = ctx.node_of(impl_ptr(index, "gather"));
  return record(ctx, {.op = Op::gather, .inputs = {ix, ii}, .axes = {axis}});
}

Tensor update_slice(Tensor& dst, int64_t axis, const Tensor& start, const Tensor& value) {
  auto& ctx = ctx_of(dst, "update_slice");
  const std::lock_guard<detail::ContextMutex> lock(ctx.mutex);
  const std::shared_ptr<TensorImpl>& d = impl_ptr(dst, "update_slice");
  if (!d->storage) {
    throw UsageError(fmt::format(
        "update_slice: the destination {}{} is pending (computed by ops not evaluated yet); the "
        "write lands in place, so evaluate the destination first (Tensor::eval)",
        dtype_name(d->dtype), ir::shape_str(ctx.shape_of(*d))));
  }
  const ir::NodeId to = ctx.node_of(d);
  const ir::NodeId v = ctx.node_of(impl_ptr(value, "update_slice"));
  const ir::NodeId at = ctx.node_of(impl_ptr(start, "update_slice"));
  const ir::NodeId id =
      ctx.trace.add({.op = Op::update_slice, .inputs = {to, v, at}, .axes = {axis}});
  ctx.rebind_pending(d, id);
  return dst;
}

}  // namespace fusejit
