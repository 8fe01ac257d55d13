// ir/interp: the CPU reference interpreter; see interp.h. This file holds the driver (input
// checks, evaluation order, freeing), the elementwise ops and the views; reductions and matmul
// are in interp_reduce.cpp, gather and the random sources in interp_gather.cpp, the shared loops
// in interp_loops.h.
//
// The meaning of each op, computed in double and then rounded to the node's dtype:
//   gelu       0.5 x (1 + erf(x / sqrt 2))
//   gelu_tanh  0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as the equal
//              x / (1 + e^(-2u)), which does not cancel where tanh(u) is near -1
//   silu       x sigmoid(x);  sigmoid  1 / (1 + e^-x);  rsqrt  1 / sqrt x
//   relu, maximum, minimum propagate NaN (as torch.relu / torch.maximum do)
// Integer results (i32, i64) are computed with wrapping 64-bit arithmetic and wrapped to their
// width; an integer operand of a floating op enters it as an f32 value, as the GPU converts it.
// Integer pow with a negative exponent truncates the real result toward zero (1 for base 1, +-1 for
// base -1, else 0; 0 for base 0 too). Casts follow round_to: float -> int truncates and wraps (NaN
// and inf give 0; the GPU saturates instead, so out-of-range casts are not something a test may
// compare), anything -> bool is `v != 0` (NaN gives true).
#include "ir/interp.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/interp_loops.h"
#include "ir/shape.h"

namespace fusejit::ir {

using namespace interp_detail;

namespace {

// ---- elementwise maps ------------------------------------------------------------------------

template <class T>
struct Operand {
  const T* data;
  const Shape* shape;
};

template <class T>
Operand<T> operand(const Value& v) {
  return {v.data<T>(), &v.shape};
}

// Computes f(operand elements) for each of the n positions of space s, a block at a time into
// a buffer of V, and hands each block to store(dst, block, count), which writes the R result.
template <class R, class V, class F, class Store, class... T>
std::shared_ptr<R[]> map_strided(int64_t n, const Space<sizeof...(T)>& s, F f, Store store,
                                 const T*... in) {
  constexpr size_t N = sizeof...(T);
  std::shared_ptr<R[]> out = allocate<R>(n);
  R* const dst = out.get();
  parallel_for(n, n, [&](int64_t begin, int64_t end) {
    std::array<int64_t, N> step;
    for (size_t k = 0; k < N; ++k) step[k] = s.inner_stride(k);
    V block[kBlock];
    for_rows(s, begin, end, [&](int64_t pos, const std::array<int64_t, N>& off, int64_t count) {
      for (int64_t j0 = 0; j0 < count; j0 += kBlock) {
        const int64_t m = std::min(kBlock, count - j0);
        [&]<size_t... K>(std::index_sequence<K...>) {
          for (int64_t j = 0; j < m; ++j) {
            block[j] = static_cast<V>(f(in[off[K] + (j0 + j) * step[K]]...));
          }
        }
        (std::make_index_sequence<N>{});
        store(dst + pos + j0, block, m);
      }
    });
  });
  return out;
}

// Node n = f(operands...), broadcast to n's shape and rounded to n's dtype; R is how n is held.
template <class R, class F, class... T>
Value map_node(const Node& n, F f, Operand<T>... ops) {
  using V = Compute<R>;
  const Space<sizeof...(T)> s =
      make_space<sizeof...(T)>(n.shape, {broadcast_strides(*ops.shape, n.shape)...});
  const DType dt = n.dtype;
  auto store = [dt](R* dst, const V* src, int64_t count) { store_span(dt, src, dst, count); };
  return Value::of<R>(n.shape, map_strided<R, V>(numel(n.shape), s, f, store, ops.data...));
}

// An integer value as float, for a floating op: integers enter float arithmetic as f32 values,
// as the GPU converts them (exact up to 2^24).
Value as_float(const Value& v) {
  if (v.f) return v;
  const int64_t* src = v.data<int64_t>();
  const int64_t n = numel(v.shape);
  std::shared_ptr<float[]> out = allocate<float>(n);
  float* dst = out.get();
  parallel_for(n, n, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) dst[k] = static_cast<float>(src[k]);
  });
  return Value::of<float>(v.shape, std::move(out));
}

// ---- elementwise ops -------------------------------------------------------------------------

double propagate_max(double a, double b) { return a != a ? a : b != b ? b : (a < b ? b : a); }
double propagate_min(double a, double b) { return a != a ? a : b != b ? b : (b < a ? b : a); }

int64_t int_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp & 1) != 0 ? -1 : 1;
    return 0;
  }
  int64_t result = 1;
  while (exp > 0) {
    if ((exp & 1) != 0) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
    exp >>= 1;
  }
  return result;
}

[[noreturn]] void unexpected(const Node& n, std::string_view where) {
  throw InternalError(
      fmt::format("interpreter: {} reached {} with result {}", op_name(n.op), where, type_str(n)));
}

Value eval_unary(const Node& n, const Value& x) {
  if (held_as_int(n.dtype)) {  // neg, abs, relu keep an integer dtype
    const Operand<int64_t> in = operand<int64_t>(x);
    auto unary = [&](auto f) { return map_node<int64_t>(n, f, in); };
    switch (n.op) {
      case Op::neg:
        return unary([](int64_t a) { return wrap_sub(0, a); });
      case Op::abs:
        return unary([](int64_t a) { return a < 0 ? wrap_sub(0, a) : a; });
      case Op::relu:
        return unary([](int64_t a) { return a < 0 ? int64_t{0} : a; });
      default:
        unexpected(n, "integer unary");
    }
  }
  const Value xf = as_float(x);
  const Operand<float> in = operand<float>(xf);
  auto unary = [&](auto f) { return map_node<float>(n, f, in); };
  switch (n.op) {
    case Op::neg:
      return unary([](double a) { return -a; });
    case Op::abs:
      return unary([](double a) { return std::fabs(a); });
    case Op::exp:
      return unary([](double a) { return std::exp(a); });
    case Op::log:
      return unary([](double a) { return std::log(a); });
    case Op::sqrt:
      return unary([](double a) { return std::sqrt(a); });
    case Op::rsqrt:
      return unary([](double a) { return 1.0 / std::sqrt(a); });
    case Op::sin:
      return unary([](double a) { return std::sin(a); });
    case Op::cos:
      return unary([](double a) { return std::cos(a); });
    case Op::tanh:
      return unary([](double a) { return std::tanh(a); });
    case Op::sigmoid:
      return unary([](double a) { return 1.0 / (1.0 + std::exp(-a)); });
    case Op::relu:
      return unary([](double a) { return a < 0.0 ? 0.0 : a; });
    case Op::gelu:
      return unary([](double a) { return 0.5 * a * (1.0 + std::erf(a / std::numbers::sqrt2)); });
    case Op::gelu_tanh:
      return unary([](double a) {
        const double k = std::sqrt(2.0 / std::numbers::pi);
        return a / (1.0 + std::exp(-2.0 * k * (a + 0.044715 * a * a * a)));
      });
    case Op::silu:
      return unary([](double a) { return a / (1.0 + std::exp(-a)); });
    case Op::reciprocal:
      return unary([](double a) { return 1.0 / a; });
    default:
      unexpected(n, "float unary");
  }
}

Value eval_binary(const Node& n, const Value& a, const Value& b) {
  if (held_as_int(n.dtype)) {  // both operands are integers (a float would promote the result)
    const Operand<int64_t> x = operand<int64_t>(a), y = operand<int64_t>(b);
    auto binary = [&](auto f) { return map_node<int64_t>(n, f, x, y); };
    switch (n.op) {
      case Op::add:
        return binary([](int64_t p, int64_t q) { return wrap_add(p, q); });
      case Op::sub:
        return binary([](int64_t p, int64_t q) { return wrap_sub(p, q); });
      case Op::mul:
        return binary([](int64_t p, int64_t q) { return wrap_mul(p, q); });
      case Op::maximum:
        return binary([](int64_t p, int64_t q) { return std::max(p, q); });
      case Op::minimum:
        return binary([](int64_t p, int64_t q) { return std::min(p, q); });
      case Op::pow:
        return binary([](int64_t p, int64_t q) { return int_pow(p, q); });
      default:
        unexpected(n, "integer binary");
    }
  }
  const Value af = as_float(a), bf = as_float(b);
  const Operand<float> x = operand<float>(af), y = operand<float>(bf);
  auto binary = [&](auto f) { return map_node<float>(n, f, x, y); };
  switch (n.op) {
    case Op::add:
      return binary([](double p, double q) { return p + q; });
    case Op::sub:
      return binary([](double p, double q) { return p - q; });
    case Op::mul:
      return binary([](double p, double q) { return p * q; });
    case Op::div:
      return binary([](double p, double q) { return p / q; });
    case Op::maximum:
      return binary([](double p, double q) { return propagate_max(p, q); });
    case Op::minimum:
      return binary([](double p, double q) { return propagate_min(p, q); });
    case Op::pow:
      return binary([](double p, double q) { return std::pow(p, q); });
    default:
      unexpected(n, "float binary");
  }
}

// A comparison in the operands' common domain: exact integers when both are held as integers.
template <class T>
Value compare_as(const Node& n, const Value& a, const Value& b) {
  const Operand<T> x = operand<T>(a), y = operand<T>(b);
  auto compare = [&](auto f) { return map_node<int64_t>(n, f, x, y); };
  switch (n.op) {
    case Op::eq:
      return compare([](T p, T q) { return p == q; });
    case Op::ne:
      return compare([](T p, T q) { return p != q; });
    case Op::lt:
      return compare([](T p, T q) { return p < q; });
    case Op::le:
      return compare([](T p, T q) { return p <= q; });
    case Op::gt:
      return compare([](T p, T q) { return p > q; });
    case Op::ge:
      return compare([](T p, T q) { return p >= q; });
    default:
      unexpected(n, "compare");
  }
}

Value eval_compare(const Node& n, const Value& a, const Value& b) {
  if (a.i && b.i) return compare_as<int64_t>(n, a, b);
  return compare_as<float>(n, as_float(a), as_float(b));
}

Value eval_where(const Node& n, const Value& cond, const Value& a, const Value& b) {
  const Operand<int64_t> c = operand<int64_t>(cond);
  if (held_as_int(n.dtype)) {
    auto pick = [](int64_t s, int64_t p, int64_t q) { return s != 0 ? p : q; };
    return map_node<int64_t>(n, pick, c, operand<int64_t>(a), operand<int64_t>(b));
  }
  const Value af = as_float(a), bf = as_float(b);
  auto pick = [](int64_t s, double p, double q) { return s != 0 ? p : q; };
  return map_node<float>(n, pick, c, operand<float>(af), operand<float>(bf));
}

// The value goes to the target's compute type here (double for floats, int64 for integers) and
// is rounded or wrapped to the target dtype when stored.
Value eval_cast(const Node& n, const Value& x) {
  const DType to = n.dtype;
  auto to_double = [](auto v) { return static_cast<double>(v); };
  auto same = [](int64_t v) { return v; };
  // round_to gives an integer-valued double that int64 holds exactly (|v| < 2^63, or a wrapped
  // multiple of 2^11).
  auto to_int = [to](double v) { return static_cast<int64_t>(round_to(to, v)); };
  if (x.f) {
    return held_as_int(to) ? map_node<int64_t>(n, to_int, operand<float>(x))
                           : map_node<float>(n, to_double, operand<float>(x));
  }
  return held_as_int(to) ? map_node<int64_t>(n, same, operand<int64_t>(x))
                         : map_node<float>(n, to_double, operand<int64_t>(x));
}

// ---- views -----------------------------------------------------------------------------------

// A copy of x read through `strides` (one per dim of `shape`) from element `first` on: permute,
// expand and slice.
template <class T>
Value gather(const Shape& shape, const Value& x, std::vector<int64_t> strides, int64_t first) {
  const Space<1> s = make_space<1>(shape, {std::move(strides)});
  auto copy = [](T v) { return v; };
  auto store = [](T* dst, const T* src, int64_t count) { std::copy_n(src, count, dst); };
  return Value::of<T>(shape,
                      map_strided<T, T>(numel(shape), s, copy, store, x.data<T>() + first));
}

// x (of dtype `from`) converted to `dtype`, rounded or wrapped as a cast does.
Value converted(const Value& x, DType from, DType dtype) {
  if (from == dtype) return x;
  Node cast{.op = Op::cast, .dtype = dtype, .shape = x.shape};
  return eval_cast(cast, x);
}

// The operands, converted to the result's dtype, copied one after another along the axis: per
// position of the leading axes, a run of extent * (product of the trailing axes) from each.
template <class T>
Value concat_as(const Node& n, const std::vector<Value>& parts) {
  const size_t axis = static_cast<size_t>(n.axes.at(0));
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < n.shape.size(); ++d) {
    if (d < axis) outer *= n.shape[d];
    if (d > axis) inner *= n.shape[d];
  }
  std::shared_ptr<T[]> out = allocate<T>(numel(n.shape));
  T* dst = out.get();
  for (int64_t o = 0; o < outer; ++o) {
    for (const Value& part : parts) {
      const int64_t run = part.shape[axis] * inner;
      dst = std::copy_n(part.data<T>() + o * run, run, dst);
    }
  }
  return Value::of<T>(n.shape, std::move(out));
}

Value eval_concat(const Node& n, const std::vector<Value>& values) {
  std::vector<Value> parts;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const Value& x = values[static_cast<size_t>(n.inputs[k])];
    // The result's dtype promotes every operand's, so a float operand's value is already one of
    // it and an integer operand widens; only an integer entering a float result converts.
    const bool widen = x.i && !held_as_int(n.dtype);
    parts.push_back(widen ? converted(x, DType::i64, n.dtype) : x);
  }
  return held_as_int(n.dtype) ? concat_as<int64_t>(n, parts) : concat_as<float>(n, parts);
}

Value eval_view(const Node& n, const Value& x) {
  std::vector<int64_t> strides;
  int64_t first = 0;
  switch (n.op) {
    case Op::reshape: {
      Value v = x;  // row-major order is unchanged: share the storage
      v.shape = n.shape;
      return v;
    }
    case Op::permute: {
      const std::vector<int64_t> own = contiguous_strides(x.shape);
      for (int64_t axis : n.axes) strides.push_back(own[static_cast<size_t>(axis)]);
      break;
    }
    case Op::expand:
      strides = broadcast_strides(x.shape, n.shape);
      break;
    case Op::slice: {
      strides = contiguous_strides(x.shape);
      const size_t axis = static_cast<size_t>(n.axes.at(0));
      first = n.start * strides[axis];
      strides[axis] *= n.step;
      break;
    }
    default:
      unexpected(n, "view");
  }
  return x.f ? gather<float>(n.shape, x, std::move(strides), first)
             : gather<int64_t>(n.shape, x, std::move(strides), first);
}

// 0, 1, ..., n-1, converted to the node's dtype as a cast from i64 would.
Value eval_arange(const Node& n) {
  const int64_t count = numel(n.shape);
  std::shared_ptr<int64_t[]> iota = allocate<int64_t>(count);
  for (int64_t k = 0; k < count; ++k) iota[static_cast<size_t>(k)] = k;
  return converted(Value::of<int64_t>(n.shape, std::move(iota)), DType::i64, n.dtype);
}

// ---- sources and results ---------------------------------------------------------------------

Value eval_constant(const Node& n) {
  if (held_as_int(n.dtype)) {
    std::shared_ptr<int64_t[]> one = allocate<int64_t>(1);
    one[0] = n.integer;
    return Value::of<int64_t>(Shape{}, std::move(one));
  }
  std::shared_ptr<float[]> one = allocate<float>(1);
  one[0] = static_cast<float>(round_to(n.dtype, n.value));
  return Value::of<float>(Shape{}, std::move(one));
}

// Storage that points into the caller's tensor, which outlives interpret(): f32 and i64 inputs
// are held in their own format and need no copy.
template <class T>
std::shared_ptr<const T[]> alias(const HostTensor& t) {
  return std::shared_ptr<const T[]>(reinterpret_cast<const T*>(t.bytes.data()), [](const T*) {});
}

// Reads each element of t as S and stores convert(element) as T.
template <class S, class T, class Convert>
std::shared_ptr<const T[]> load(const HostTensor& t, Convert convert) {
  const int64_t n = t.numel();
  std::shared_ptr<T[]> out = allocate<T>(n);
  T* dst = out.get();
  const std::byte* src = t.bytes.data();
  parallel_for(n, n, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      S s;
      std::memcpy(&s, src + k * static_cast<int64_t>(sizeof(S)), sizeof(S));
      dst[k] = static_cast<T>(convert(s));
    }
  });
  return out;
}

Value from_host(const HostTensor& t) {
  auto same = [](auto s) { return s; };
  switch (t.dtype) {
    case DType::f32:
      return Value::of<float>(t.shape, alias<float>(t));
    case DType::f16:
      return Value::of<float>(t.shape, load<uint16_t, float>(t, half_bits_to_float));
    case DType::bf16:
      return Value::of<float>(t.shape, load<uint16_t, float>(t, bf16_bits_to_float));
    case DType::i32:
      return Value::of<int64_t>(t.shape, load<int32_t, int64_t>(t, same));
    case DType::i64:
      return Value::of<int64_t>(t.shape, alias<int64_t>(t));
    case DType::boolean:
      return Value::of<int64_t>(
          t.shape, load<uint8_t, int64_t>(t, [](uint8_t b) { return b != 0 ? 1 : 0; }));
    case DType::i8:
      return Value::of<int64_t>(t.shape, load<int8_t, int64_t>(t, same));
  }
  throw InternalError("interpreter: unknown input dtype");
}

// Writes convert(element) as S for each element of src into t.
template <class S, class T, class Convert>
void store(HostTensor& t, const T* src, Convert convert) {
  const int64_t n = t.numel();
  std::byte* dst = t.bytes.data();
  parallel_for(n, n, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const S s = convert(src[k]);
      std::memcpy(dst + k * static_cast<int64_t>(sizeof(S)), &s, sizeof(S));
    }
  });
}

HostTensor to_host(const Node& n, const Value& v) {
  HostTensor t(n.dtype, n.shape);
  switch (n.dtype) {
    case DType::f32:
      store<float>(t, v.data<float>(), [](float f) { return f; });
      break;
    case DType::f16:
      store<uint16_t>(t, v.data<float>(), float_to_half_bits);
      break;
    case DType::bf16:
      store<uint16_t>(t, v.data<float>(), float_to_bf16_bits);
      break;
    case DType::i32:
      store<int32_t>(t, v.data<int64_t>(), [](int64_t i) { return static_cast<int32_t>(i); });
      break;
    case DType::i64:
      store<int64_t>(t, v.data<int64_t>(), [](int64_t i) { return i; });
      break;
    case DType::boolean:
      store<uint8_t>(t, v.data<int64_t>(), [](int64_t i) { return static_cast<uint8_t>(i != 0); });
      break;
    case DType::i8:
      store<int8_t>(t, v.data<int64_t>(), [](int64_t i) { return static_cast<int8_t>(i); });
      break;
  }
  return t;
}

// ---- driver ----------------------------------------------------------------------------------

std::string host_type_str(const HostTensor& t) {
  return fmt::format("{}{}", dtype_name(t.dtype), shape_str(t.shape));
}

void check_inputs(const Graph& g, const std::vector<NodeId>& ids,
                  const std::vector<HostTensor>& inputs) {
  if (inputs.size() != ids.size()) {
    throw UsageError(
        fmt::format("interpret: the graph has {} input(s) but {} tensor(s) were given; pass "
                    "one tensor per input node, in order",
                    ids.size(), inputs.size()));
  }
  for (size_t k = 0; k < ids.size(); ++k) {
    const Node& n = g.node(ids[k]);
    const HostTensor& t = inputs[k];
    if (t.dtype != n.dtype || t.shape != n.shape) {
      throw UsageError(
          fmt::format("interpret: input {} is {} but the graph's input %{} is {}; pass a "
                      "tensor of the input's dtype and shape",
                      k, host_type_str(t), ids[k], type_str(n)));
    }
    const size_t want = static_cast<size_t>(numel(n.shape) * dtype_size(n.dtype));
    if (t.bytes.size() != want) {
      throw UsageError(
          fmt::format("interpret: input {} ({}) holds {} bytes but needs {}; build it with "
                      "HostTensor(dtype, shape)",
                      k, host_type_str(t), t.bytes.size(), want));
    }
  }
}

Value eval_node(const Node& n, const std::vector<Value>& values) {
  auto arg = [&](size_t k) -> const Value& { return values[static_cast<size_t>(n.inputs[k])]; };
  switch (op_kind(n.op)) {
    case OpKind::source:  // inputs are bound by the driver
      return n.op == Op::arange ? eval_arange(n) : eval_constant(n);
    case OpKind::unary:
      return eval_unary(n, arg(0));
    case OpKind::binary:
      return eval_binary(n, arg(0), arg(1));
    case OpKind::compare:
      return eval_compare(n, arg(0), arg(1));
    case OpKind::select:
      return eval_where(n, arg(0), arg(1), arg(2));
    case OpKind::cast:
      return eval_cast(n, arg(0));
    case OpKind::reduce:
      return eval_reduce(n, arg(0));
    case OpKind::view:
      return n.op == Op::concat ? eval_concat(n, values) : eval_view(n, arg(0));
    case OpKind::matmul:
      return eval_matmul(n, arg(0), arg(1));
    case OpKind::gather:
      return eval_gather(n, arg(0), arg(1));
    case OpKind::random:
      return eval_random(n, arg(0));
    case OpKind::update:
      return eval_update(n, arg(0), arg(1), arg(2));
  }
  unexpected(n, "eval_node");
}

}  // namespace

std::vector<HostTensor> interpret(const Graph& g, const std::vector<HostTensor>& inputs) {
  const std::vector<NodeId> input_ids = g.inputs();
  check_inputs(g, input_ids, inputs);

  // Liveness: only nodes an output depends on are evaluated, and each value is dropped right
  // after its last use (outputs are kept to the end), so large graphs stay within memory.
  const size_t size = g.size();
  constexpr size_t kKeep = static_cast<size_t>(-1);
  std::vector<char> needed(size, 0);
  std::vector<size_t> last_use(size, 0);
  for (NodeId id : g.outputs()) {
    needed[static_cast<size_t>(id)] = 1;
    last_use[static_cast<size_t>(id)] = kKeep;
  }
  for (size_t i = size; i-- > 0;) {
    if (!needed[i]) continue;
    for (NodeId in : g.node(static_cast<NodeId>(i)).inputs) {
      const size_t k = static_cast<size_t>(in);
      needed[k] = 1;
      if (last_use[k] != kKeep) last_use[k] = std::max(last_use[k], i);
    }
  }

  std::vector<Value> values(size);
  size_t next_input = 0;
  for (size_t i = 0; i < size; ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (n.op == Op::input) {
      const HostTensor& t = inputs[next_input++];
      if (needed[i]) values[i] = from_host(t);
      continue;
    }
    if (!needed[i]) continue;
    values[i] = eval_node(n, values);
    for (NodeId in : n.inputs) {
      const size_t k = static_cast<size_t>(in);
      if (last_use[k] == i) values[k] = Value{};
    }
  }

  std::vector<HostTensor> out;
  out.reserve(g.outputs().size());
  for (NodeId id : g.outputs()) out.push_back(to_host(g.node(id), values[static_cast<size_t>(id)]));
  return out;
}

}  // namespace fusejit::ir
