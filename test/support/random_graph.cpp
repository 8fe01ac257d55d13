// See random_graph.h. Values stay finite on normal(0, 1) inputs: log and sqrt see abs(x) + 1,
// div sees a divisor of at least 1 in magnitude, exp sees tanh(x); so the reference and the
// GPU can be compared by relative error without NaN or overflow noise.
#include "support/random_graph.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "ir/shape.h"

namespace fusejit::testing {

namespace {

using ir::NodeId;
using ir::Op;

class Builder {
 public:
  Builder(uint64_t seed, RandomGraphs kind) : rng_(seed), wide_(kind == RandomGraphs::wide) {}

  ir::Graph build() {
    const DType dtype =
        wide_ ? pick<DType>({DType::f32, DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64})
              : pick<DType>({DType::f32, DType::f32, DType::f32, DType::bf16, DType::f16});
    integers_ = is_integral(dtype);
    const int rank = uniform(1, wide_ ? 4 : 3);
    Shape shape;
    for (int i = 0; i < rank; ++i) shape.push_back(pick<int64_t>({1, 3, 8, 33, 64, 130, 256, 1000}));
    // Integer sums stay far from overflow on [-8, 8] inputs when there are few enough terms.
    const int64_t cap = integers_ ? 65536 : 300000;
    if (!wide_ && ir::numel(shape) > cap) shape.back() = 7;
    while (ir::numel(shape) > cap) {
      auto widest = std::max_element(shape.begin(), shape.end());
      *widest = *widest > 7 ? 7 : 1;
    }

    values_.push_back(ir::add_input(g_, dtype, shape));
    if (coin()) values_.push_back(ir::add_input(g_, dtype, shape));
    if (coin()) {  // a broadcast operand: drop leading dims or set some to 1
      Shape b = shape;
      if (b.size() > 1 && coin()) b.erase(b.begin());
      else for (auto& d : b) if (coin()) d = 1;
      values_.push_back(ir::add_input(g_, integers_ || coin() ? dtype : DType::f32, b));
    }
    const int ops = uniform(2, 9);
    for (int i = 0; i < ops; ++i) step();
    std::vector<NodeId> outs{values_.back()};
    if (wide_ && uniform(0, 5) == 0) {
      // A bool output. Comparing two computed floats could flip where they are a rounding
      // apart, so float graphs compare an input, which both sides see exactly.
      const Op cmp = pick<Op>({Op::lt, Op::ge, Op::eq});
      const NodeId x = is_integral(node(values_.back()).dtype) ? values_.back() : values_.front();
      const NodeId y = is_integral(node(x).dtype) ? partner(x) : ir::add_constant(g_, node(x).dtype, 0.25);
      outs.push_back(ir::add_binary(g_, cmp, x, y));
    } else if (values_.size() > 3 && coin()) {
      const NodeId other = values_[static_cast<size_t>(uniform(1, static_cast<int>(values_.size()) - 2))];
      if (g_.node(other).op != Op::input) outs.push_back(other);
    }
    g_.set_outputs(outs);
    return std::move(g_);
  }

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool coin() { return uniform(0, 1) == 1; }
  template <class T>
  T pick(std::initializer_list<T> items) {
    return *(items.begin() + uniform(0, static_cast<int>(items.size()) - 1));
  }
  NodeId any() { return values_[static_cast<size_t>(uniform(0, static_cast<int>(values_.size()) - 1))]; }
  NodeId last() { return values_.back(); }
  const ir::Node& node(NodeId id) { return g_.node(id); }

  // A value that broadcasts with `x` (same shape, or x's shape broadcasts with it).
  NodeId partner(NodeId x) {
    std::vector<NodeId> ok;
    for (NodeId v : values_) {
      const Shape& a = node(x).shape;
      const Shape& b = node(v).shape;
      if (integers_ && is_integral(node(x).dtype) != is_integral(node(v).dtype)) continue;
      if (ir::broadcasts_to(b, a) || ir::broadcasts_to(a, b)) ok.push_back(v);
    }
    return ok[static_cast<size_t>(uniform(0, static_cast<int>(ok.size()) - 1))];
  }

  NodeId safe_unary(NodeId x) {
    if (is_integral(node(x).dtype)) return ir::add_unary(g_, pick<Op>({Op::neg, Op::abs}), x);
    const Op op = pick<Op>({Op::neg, Op::abs, Op::exp, Op::log, Op::sqrt, Op::rsqrt, Op::sin,
                            Op::cos, Op::tanh, Op::sigmoid, Op::relu, Op::gelu, Op::gelu_tanh,
                            Op::silu, Op::reciprocal});
    const DType t = node(x).dtype;
    auto one = [&] { return ir::add_constant(g_, t, 1.0); };
    switch (op) {
      case Op::log: case Op::sqrt: case Op::rsqrt: case Op::reciprocal:
        return ir::add_unary(g_, op, ir::add_binary(g_, Op::add, ir::add_unary(g_, Op::abs, x), one()));
      case Op::exp:
        return ir::add_unary(g_, op, ir::add_unary(g_, Op::tanh, x));
      default:
        return ir::add_unary(g_, op, x);
    }
  }

  void step() {
    const NodeId x = coin() ? last() : any();
    const int kind = uniform(0, 9);
    NodeId y = -1;
    if (kind <= 2) {
      y = safe_unary(x);
    } else if (kind <= 5) {
      const NodeId p = partner(x);
      // Integers: no products or quotients, which would leave [-8, 8] for overflow or rounding.
      const Op op = integers_ ? pick<Op>({Op::add, Op::sub, Op::maximum, Op::minimum})
                              : pick<Op>({Op::add, Op::sub, Op::mul, Op::maximum, Op::minimum, Op::div});
      if (op == Op::div) {
        const NodeId den = ir::add_binary(g_, Op::add, ir::add_unary(g_, Op::abs, p),
                                          ir::add_constant(g_, node(p).dtype, 1.0));
        y = ir::add_binary(g_, op, x, den);
      } else {
        y = ir::add_binary(g_, op, x, p);
      }
    } else if (kind == 6) {
      const NodeId p = partner(x);
      const NodeId c = ir::add_binary(g_, pick<Op>({Op::lt, Op::ge, Op::ne}), x, p);
      y = ir::add_where(g_, c, x, p);
    } else if (kind == 7) {
      y = view(x);
    } else if (kind == 8) {
      // Never float to integer: a value one rounding apart on the GPU could truncate differently.
      y = is_integral(node(x).dtype) ? ir::add_cast(g_, x, pick<DType>({DType::i32, DType::i64, DType::f32}))
                                     : ir::add_cast(g_, x, pick<DType>({DType::f32, DType::bf16, DType::f16}));
    } else {
      y = reduce(x);
    }
    values_.push_back(y);
  }

  NodeId view(NodeId x) {
    const Shape s = node(x).shape;
    if (uniform(0, 2) == 0) {
      if (const NodeId y = index_view(x); y >= 0) return y;
    }
    if (s.size() >= 2 && coin()) {
      std::vector<int64_t> perm(s.size());
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng_);
      return ir::add_permute(g_, x, perm);
    }
    if (s.size() >= 2 && coin()) {  // merge the first two dims
      Shape r(s.begin() + 1, s.end());
      r[0] *= s[0];
      return ir::add_reshape(g_, x, r);
    }
    Shape e = s;
    e.insert(e.begin(), 2);
    return ir::add_expand(g_, x, e);
  }

  // Along an axis of x of extent 2 or more: a rotation (concat of x's two pieces, swapped, one
  // maybe negated: the rotary embedding's rotate_half), a strided slice, or x scaled by an arange
  // of the axis's positions over its extent (values in [0, 1)); -1 when x has no such axis.
  NodeId index_view(NodeId x) {
    const Shape s = node(x).shape;
    std::vector<int64_t> axes;
    for (size_t a = 0; a < s.size(); ++a) {
      if (s[a] >= 2) axes.push_back(static_cast<int64_t>(a));
    }
    if (axes.empty()) return -1;
    const int64_t a = axes[static_cast<size_t>(uniform(0, static_cast<int>(axes.size()) - 1))];
    const int64_t n = s[static_cast<size_t>(a)];
    switch (uniform(0, is_integral(node(x).dtype) ? 1 : 2)) {
      case 0: {
        const int64_t k = uniform(1, static_cast<int>(n) - 1);
        NodeId tail = ir::add_slice(g_, x, a, k, n);
        if (coin()) tail = ir::add_unary(g_, Op::neg, tail);
        return ir::add_concat(g_, {tail, ir::add_slice(g_, x, a, 0, k)}, a);
      }
      case 1:
        return ir::add_slice(g_, x, a, uniform(0, static_cast<int>(n) - 1), n, uniform(1, 3));
      default: {
        Shape positions(s.size() - static_cast<size_t>(a), 1);
        positions[0] = n;  // [n, 1, ..., 1]: broadcast along axis a
        const NodeId r = ir::add_reshape(g_, ir::add_arange(g_, n, DType::f32), positions);
        const NodeId scale = ir::add_constant(g_, DType::f32, 1.0 / static_cast<double>(n));
        return ir::add_binary(g_, Op::mul, x, ir::add_binary(g_, Op::mul, r, scale));
      }
    }
  }

  // Sums into at most this many values are taken over magnitudes (see reduce()).
  static constexpr int64_t kFewResults = 4;

  NodeId reduce(NodeId x) {
    const Shape s = node(x).shape;
    if (s.empty()) return safe_unary(x);  // nothing left to reduce
    const Op op = is_integral(node(x).dtype) ? pick<Op>({Op::sum, Op::max, Op::min})
                                             : pick<Op>({Op::sum, Op::mean, Op::max, Op::min});
    std::vector<int64_t> axes;
    if (wide_ && coin()) {  // one axis, any of them: leading, middle and last all come up
      axes.push_back(uniform(0, static_cast<int>(s.size()) - 1));
    } else {
      for (size_t i = 0; i < s.size(); ++i) {
        if (coin()) axes.push_back(static_cast<int64_t>(i));
      }
    }
    if (axes.empty()) axes.push_back(static_cast<int64_t>(s.size()) - 1);
    // A sum into a handful of values over signed data is ill-conditioned: the result, about
    // sqrt(n) in size, is far below the sum of its terms' magnitudes, n, so an f32 reduction
    // tree rounding well within the kernels' contract can miss the 1e-5 relative bound on the
    // few values there are to average over. Such sums are taken over magnitudes (one sign):
    // the whole-tensor sum is still covered, and well-conditioned.
    int64_t results = 1;
    for (size_t i = 0; i < s.size(); ++i) {
      if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) == axes.end()) {
        results *= s[i];
      }
    }
    if ((op == Op::sum || op == Op::mean) && results <= kFewResults &&
        is_floating(node(x).dtype)) {
      x = ir::add_unary(g_, Op::abs, x);
    }
    const bool keepdim = coin();
    const NodeId r = ir::add_reduce(g_, op, x, axes, keepdim);
    // The normalization pattern: broadcast the result back against its input.
    if (keepdim && coin()) {
      return ir::add_binary(g_, is_integral(node(x).dtype) ? Op::sub : pick<Op>({Op::sub, Op::mul}), x, r);
    }
    return r;
  }

  std::mt19937_64 rng_;
  bool wide_ = false;
  bool integers_ = false;  // an integer graph: only ops that stay exact on small integers
  ir::Graph g_;
  std::vector<NodeId> values_;
};

}  // namespace

ir::Graph random_graph(uint64_t seed, RandomGraphs kind) { return Builder(seed, kind).build(); }

}  // namespace fusejit::testing
