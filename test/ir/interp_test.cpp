// The CPU reference interpreter: every op of the table against hand-computed values (the values
// of transcendental functions were computed independently, in double), broadcasting, dtypes,
// reductions, views, matmul, the threaded paths, and input errors.
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <set>
#include <string>

#include "fusejit/error.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/interp.h"
#include "ir/random.h"
#include "ir/shape.h"
#include "ir/text.h"
#include "support/catch.h"

using namespace fusejit;
using namespace fusejit::ir;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// The ops of every graph run through `run`, so a test can check that it covered the table.
std::set<Op>& covered() {
  static std::set<Op> ops;
  return ops;
}

std::vector<HostTensor> run(const Graph& g, const std::vector<HostTensor>& inputs) {
  for (const Node& n : g.nodes()) covered().insert(n.op);
  return interpret(g, inputs);
}

HostTensor tensor(DType dtype, Shape shape, const std::vector<double>& values) {
  HostTensor t(dtype, std::move(shape));
  REQUIRE(static_cast<int64_t>(values.size()) == t.numel());
  for (size_t i = 0; i < values.size(); ++i) t.set(static_cast<int64_t>(i), values[i]);
  return t;
}

// i64 values beyond 2^53, written exactly.
HostTensor i64_tensor(Shape shape, const std::vector<int64_t>& values) {
  HostTensor t(DType::i64, std::move(shape));
  REQUIRE(static_cast<int64_t>(values.size()) == t.numel());
  std::memcpy(t.bytes.data(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

int64_t i64_at(const HostTensor& t, size_t i) {
  int64_t v;
  std::memcpy(&v, t.bytes.data() + i * sizeof v, sizeof v);
  return v;
}

std::vector<double> iota(int64_t n, double start = 0.0, double step = 1.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + step * static_cast<double>(i);
  return v;
}

// Checks dtype, shape and values; NaN must be NaN, infinities exact, other values within a
// relative 1e-6 (f32 results of transcendental functions).
void check_tensor(const HostTensor& t, DType dtype, const Shape& shape,
                  const std::vector<double>& want) {
  CHECK(dtype_name(t.dtype) == dtype_name(dtype));
  REQUIRE(shape_str(t.shape) == shape_str(shape));
  REQUIRE(t.numel() == static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = t.get(static_cast<int64_t>(i));
    INFO("element " << i << ": got " << got << ", want " << want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got));
    } else if (std::isinf(want[i]) || !is_floating(dtype)) {
      CHECK(got == want[i]);
    } else {
      CHECK(got == Approx(want[i]).epsilon(1e-6).margin(1e-12));
    }
  }
}

struct Arg {
  DType dtype;
  Shape shape;
  std::vector<double> values;
};

struct Case {
  Op op;
  std::vector<Arg> args;
  DType dtype;
  Shape shape;
  std::vector<double> want;
};

// One node of `op` over fresh inputs.
void check_case(const Case& c) {
  INFO(op_name(c.op) << " of " << c.args.size() << " operand(s), first "
                     << dtype_name(c.args[0].dtype) << shape_str(c.args[0].shape));
  Graph g;
  std::vector<NodeId> ids;
  std::vector<HostTensor> inputs;
  for (const Arg& a : c.args) {
    ids.push_back(add_input(g, a.dtype, a.shape));
    inputs.push_back(tensor(a.dtype, a.shape, a.values));
  }
  g.add_output(g.add({.op = c.op, .inputs = ids}));
  const std::vector<HostTensor> out = run(g, inputs);
  REQUIRE(out.size() == 1);
  check_tensor(out[0], c.dtype, c.shape, c.want);
}

using enum DType;

const double kE = std::numbers::e;
const double kHalfPi = std::numbers::pi / 2;
const double k2m8 = 1.0 / 256;  // 2^-8

// Elementwise cases, several per op: broadcasting, integer and bool dtypes, rounding.
const std::vector<Case>& elementwise_cases() {
  static const std::vector<Case> cases = {
      {Op::neg, {{f32, {4}, {-1, 0, 0.5, 2}}}, f32, {4}, {1, 0, -0.5, -2}},
      {Op::neg, {{i32, {3}, {-3, 5, -2147483648.0}}}, i32, {3}, {3, -5, -2147483648.0}},
      {Op::abs, {{f32, {3}, {-1.5, 2, -0.0}}}, f32, {3}, {1.5, 2, 0}},
      {Op::abs, {{i64, {2}, {-7, 7}}}, i64, {2}, {7, 7}},
      {Op::exp, {{f32, {3}, {0, 1, -1}}}, f32, {3}, {1, kE, 0.36787944117144233}},
      {Op::exp, {{i32, {2}, {0, 1}}}, f32, {2}, {1, kE}},
      {Op::log,
       {{f32, {5}, {1, kE, 0.5, 0, -1}}},
       f32,
       {5},
       {0, 1, -0.6931471805599453, -kInf, kNaN}},
      {Op::sqrt, {{f32, {4}, {4, 2, 0, -1}}}, f32, {4}, {2, std::numbers::sqrt2, 0, kNaN}},
      {Op::rsqrt, {{f32, {3}, {4, 0.25, 0}}}, f32, {3}, {0.5, 2, kInf}},
      {Op::sin, {{f32, {3}, {0, kHalfPi, 1}}}, f32, {3}, {0, 1, 0.8414709848078965}},
      {Op::cos, {{f32, {2}, {0, 1}}}, f32, {2}, {1, 0.5403023058681398}},
      {Op::tanh, {{f32, {3}, {0, 1, -2}}}, f32, {3}, {0, 0.7615941559557649, -0.9640275800758169}},
      {Op::sigmoid,
       {{f32, {3}, {0, 1, -2}}},
       f32,
       {3},
       {0.5, 0.7310585786300049, 0.11920292202211755}},
      {Op::relu, {{f32, {4}, {-1, 0, 2.5, kNaN}}}, f32, {4}, {0, 0, 2.5, kNaN}},
      {Op::relu, {{i32, {2}, {-4, 3}}}, i32, {2}, {0, 3}},
      {Op::gelu,
       {{f32, {4}, {0, 1, -1, 2}}},
       f32,
       {4},
       {0, 0.8413447460685429, -0.15865525393145707, 1.9544997361036416}},
      {Op::gelu_tanh,
       {{f32, {4}, {0, 1, -1, 2}}},
       f32,
       {4},
       {0, 0.8411919906082768, -0.15880800939172324, 1.954597694087775}},
      {Op::silu, {{f32, {3}, {0, 1, -2}}}, f32, {3}, {0, 0.7310585786300049, -0.2384058440442351}},
      {Op::silu, {{bf16, {1}, {1}}}, bf16, {1}, {0.73046875}},  // 0.7310... rounded to bf16
      {Op::reciprocal, {{f32, {3}, {2, -0.5, 0}}}, f32, {3}, {0.5, -2, kInf}},

      {Op::add,
       {{f32, {2, 3}, {1, 2, 3, 4, 5, 6}}, {f32, {3}, {10, 20, 30}}},
       f32,
       {2, 3},
       {11, 22, 33, 14, 25, 36}},
      {Op::add, {{i32, {2}, {2147483647, -5}}, {i32, {}, {1}}}, i32, {2}, {-2147483648.0, -4}},
      {Op::add, {{i32, {2}, {1, 2}}, {i64, {2, 1}, {10, 20}}}, i64, {2, 2}, {11, 12, 21, 22}},
      // bf16 storage: 1 + 2^-8 ties to 1 (even), 1 + 3 * 2^-8 ties to 1 + 2^-6 (even).
      {Op::add, {{bf16, {2}, {1, 1}}, {bf16, {2}, {k2m8, 3 * k2m8}}}, bf16, {2}, {1, 1.015625}},
      {Op::add, {{f16, {1}, {60000}}, {f16, {1}, {10000}}}, f16, {1}, {kInf}},
      {Op::sub,
       {{f32, {2, 1}, {1, 2}}, {f32, {1, 3}, {10, 20, 30}}},
       f32,
       {2, 3},
       {-9, -19, -29, -8, -18, -28}},
      {Op::sub, {{i32, {1}, {-2147483648.0}}, {i32, {1}, {1}}}, i32, {1}, {2147483647}},
      {Op::mul, {{f32, {2}, {1.5, -2}}, {i32, {2}, {4, 3}}}, f32, {2}, {6, -6}},
      {Op::mul,
       {{i32, {3}, {65536, 46341, -3}}, {i32, {3}, {65536, 46341, 7}}},
       i32,
       {3},
       {0, -2147479015, -21}},
      {Op::div, {{i32, {3}, {7, -7, 1}}, {i32, {3}, {2, 2, 0}}}, f32, {3}, {3.5, -3.5, kInf}},
      {Op::div, {{f32, {2, 2}, {1, 2, 3, 4}}, {f32, {2}, {2, 4}}}, f32, {2, 2}, {0.5, 0.5, 1.5, 1}},
      {Op::div, {{f16, {1}, {1}}, {f16, {1}, {3}}}, f16, {1}, {0.333251953125}},
      {Op::maximum,
       {{f32, {3}, {1, kNaN, -2}}, {f32, {3}, {3, 0, kNaN}}},
       f32,
       {3},
       {3, kNaN, kNaN}},
      {Op::maximum, {{i64, {2, 2}, {1, 5, -3, 7}}, {i64, {2}, {2, 2}}}, i64, {2, 2}, {2, 5, 2, 7}},
      {Op::minimum,
       {{f32, {3}, {1, kNaN, -2}}, {f32, {3}, {3, 0, kNaN}}},
       f32,
       {3},
       {1, kNaN, kNaN}},
      {Op::minimum, {{f32, {2}, {-1, 4}}, {f32, {}, {0}}}, f32, {2}, {-1, 0}},
      {Op::minimum, {{i32, {3}, {1, -5, 3}}, {i32, {1}, {0}}}, i32, {3}, {0, -5, 0}},
      {Op::pow, {{f32, {3}, {2, 9, -8}}, {f32, {3}, {3, 0.5, 2}}}, f32, {3}, {8, 3, 64}},
      {Op::pow,
       {{i32, {5}, {2, 3, 2, -1, 2}}, {i32, {5}, {10, 2, -1, -3, 31}}},
       i32,
       {5},
       {1024, 9, 0, -1, -2147483648.0}},

      {Op::eq, {{f32, {3}, {1, 2, kNaN}}, {f32, {}, {2}}}, boolean, {3}, {0, 1, 0}},
      {Op::ne, {{f32, {3}, {1, 2, kNaN}}, {f32, {}, {2}}}, boolean, {3}, {1, 0, 1}},
      {Op::lt, {{f32, {3}, {1, 2, kNaN}}, {f32, {}, {2}}}, boolean, {3}, {1, 0, 0}},
      {Op::le, {{f32, {3}, {1, 2, kNaN}}, {f32, {}, {2}}}, boolean, {3}, {1, 1, 0}},
      {Op::gt, {{f32, {3}, {1, 2, kNaN}}, {f32, {}, {2}}}, boolean, {3}, {0, 0, 0}},
      {Op::ge, {{f32, {3}, {1, 2, kNaN}}, {f32, {}, {2}}}, boolean, {3}, {0, 1, 0}},
      {Op::lt, {{i32, {2, 1}, {1, 3}}, {f32, {2}, {2, 0.5}}}, boolean, {2, 2}, {1, 0, 0, 0}},
      {Op::gt, {{boolean, {2}, {1, 0}}, {boolean, {}, {0}}}, boolean, {2}, {1, 0}},
      {Op::eq, {{i32, {2}, {5, 6}}, {i64, {2}, {5, 5}}}, boolean, {2}, {1, 0}},

      {Op::where,
       {{boolean, {2, 1}, {1, 0}}, {f32, {2, 3}, {1, 2, 3, 4, 5, 6}}, {f32, {}, {-1}}},
       f32,
       {2, 3},
       {1, 2, 3, -1, -1, -1}},
      {Op::where,
       {{boolean, {3}, {0, 1, 0}}, {i32, {3}, {1, 2, 3}}, {i64, {1}, {-9}}},
       i64,
       {3},
       {-9, 2, -9}},
      {Op::where,
       {{boolean, {2}, {1, 0}}, {f32, {2}, {0.5, 0.5}}, {i32, {2}, {7, 7}}},
       f32,
       {2},
       {0.5, 7}},
  };
  return cases;
}

struct CastCase {
  Arg from;
  DType to;
  std::vector<double> want;
};

const std::vector<CastCase>& cast_cases() {
  static const std::vector<CastCase> cases = {
      {{f32, {4}, {1.7, -1.7, 3e9, kNaN}}, i32, {1, -1, -1294967296, 0}},
      {{f32, {3}, {0, 0.1, kNaN}}, boolean, {0, 1, 1}},
      {{f32, {2}, {1 + k2m8, 65520}}, bf16, {1, 65536}},
      {{f32, {2}, {1 + k2m8, 65520}}, f16, {1 + k2m8, kInf}},
      {{i64, {2}, {4294967303.0, -1}}, i32, {7, -1}},  // 2^32 + 7 wraps to 7
      {{i32, {2}, {70000, 3}}, f16, {kInf, 3}},
      {{i32, {2}, {0, -3}}, boolean, {0, 1}},
      {{boolean, {2}, {1, 0}}, f32, {1, 0}},
      {{f16, {1}, {0.1}}, f32, {0.0999755859375}},
      {{bf16, {1}, {3}}, i64, {3}},
  };
  return cases;
}

void check_casts() {
  for (const CastCase& c : cast_cases()) {
    INFO("cast " << dtype_name(c.from.dtype) << " -> " << dtype_name(c.to));
    Graph g;
    g.add_output(add_cast(g, add_input(g, c.from.dtype, c.from.shape), c.to));
    check_tensor(run(g, {tensor(c.from.dtype, c.from.shape, c.from.values)})[0], c.to, c.from.shape,
                 c.want);
  }
}

void check_sources() {
  Graph g;
  const NodeId x = add_input(g, i64, {3});
  g.add_output(x);
  g.add_output(add_constant(g, f16, 0.1));
  g.add_output(add_constant(g, i32, -3.9));
  g.add_output(add_constant(g, boolean, 2));
  const int64_t big = (int64_t{1} << 60) + 1;  // not representable as a double
  const std::vector<HostTensor> out = run(g, {i64_tensor({3}, {big, -big, 5})});
  REQUIRE(out.size() == 4);
  CHECK(i64_at(out[0], 0) == big);
  CHECK(i64_at(out[0], 1) == -big);
  check_tensor(out[1], f16, {}, {0.0999755859375});
  check_tensor(out[2], i32, {}, {-3});
  check_tensor(out[3], boolean, {}, {1});
}

// x[2,3] = {1, 2, 3, 4, 5, 6}.
void check_reductions(Op op) {
  Graph g;
  const NodeId x = add_input(g, f32, {2, 3});
  const NodeId y = add_input(g, f32, {2, 3, 4});
  const NodeId i = add_input(g, i32, {2, 2});
  g.add_output(add_reduce(g, op, x, {1}, false));
  g.add_output(add_reduce(g, op, x, {0}, true));
  g.add_output(add_reduce(g, op, y, {0, 2}, false));
  g.add_output(add_reduce(g, op, y, {2, 0, 1}, true));
  const bool int_ok = op != Op::mean;
  if (int_ok) g.add_output(add_reduce(g, op, i, {0, 1}, false));
  std::vector<HostTensor> in = {tensor(f32, {2, 3}, iota(6, 1)), tensor(f32, {2, 3, 4}, iota(24)),
                                tensor(i32, {2, 2}, {2147483647, 2147483647, -3, 5})};
  const std::vector<HostTensor> out = run(g, in);
  // y[a][b][c] = 12a + 4b + c; over a and c for a fixed b: {0..3, 12..15} + 4b.
  switch (op) {
    case Op::sum:
      check_tensor(out[0], f32, {2}, {6, 15});
      check_tensor(out[1], f32, {1, 3}, {5, 7, 9});
      check_tensor(out[2], f32, {3}, {60, 92, 124});
      check_tensor(out[3], f32, {1, 1, 1}, {276});
      check_tensor(out[4], i64, {}, {4294967296.0});  // accumulated in i64: no wrap at 32 bits
      break;
    case Op::mean:
      check_tensor(out[0], f32, {2}, {2, 5});
      check_tensor(out[1], f32, {1, 3}, {2.5, 3.5, 4.5});
      check_tensor(out[2], f32, {3}, {7.5, 11.5, 15.5});
      check_tensor(out[3], f32, {1, 1, 1}, {11.5});
      break;
    case Op::max:
      check_tensor(out[0], f32, {2}, {3, 6});
      check_tensor(out[1], f32, {1, 3}, {4, 5, 6});
      check_tensor(out[2], f32, {3}, {15, 19, 23});
      check_tensor(out[3], f32, {1, 1, 1}, {23});
      check_tensor(out[4], i32, {}, {2147483647});
      break;
    case Op::min:
      check_tensor(out[0], f32, {2}, {1, 4});
      check_tensor(out[1], f32, {1, 3}, {1, 2, 3});
      check_tensor(out[2], f32, {3}, {0, 4, 8});
      check_tensor(out[3], f32, {1, 1, 1}, {0});
      check_tensor(out[4], i32, {}, {-3});
      break;
    default:
      FAIL("not a reduction: " << op_name(op));
  }
}

void check_views(Op op) {
  Graph g;
  const NodeId x = add_input(g, f32, {2, 3});
  const HostTensor xv = tensor(f32, {2, 3}, iota(6));
  switch (op) {
    case Op::reshape:
      g.add_output(add_reshape(g, x, {3, 1, 2}));
      check_tensor(run(g, {xv})[0], f32, {3, 1, 2}, iota(6));
      break;
    case Op::permute: {
      const NodeId y = add_input(g, i32, {2, 3, 4});
      g.add_output(add_permute(g, x, {1, 0}));
      g.add_output(add_permute(g, y, {2, 0, 1}));  // out[i][j][k] = y[j][k][i]
      const std::vector<HostTensor> out = run(g, {xv, tensor(i32, {2, 3, 4}, iota(24))});
      check_tensor(out[0], f32, {3, 2}, {0, 3, 1, 4, 2, 5});
      std::vector<double> want;
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 2; ++j)
          for (int k = 0; k < 3; ++k) want.push_back(12 * j + 4 * k + i);
      check_tensor(out[1], i32, {4, 2, 3}, want);
      break;
    }
    case Op::expand: {
      const NodeId v = add_input(g, boolean, {3});
      const NodeId c = add_input(g, f32, {2, 1});
      g.add_output(add_expand(g, v, {2, 3}));
      g.add_output(add_expand(g, c, {2, 2, 3}));
      g.add_output(add_expand(g, x, {2, 3}));
      const std::vector<HostTensor> out =
          run(g, {xv, tensor(boolean, {3}, {1, 0, 1}), tensor(f32, {2, 1}, {7, 8})});
      check_tensor(out[0], boolean, {2, 3}, {1, 0, 1, 1, 0, 1});
      check_tensor(out[1], f32, {2, 2, 3}, {7, 7, 7, 8, 8, 8, 7, 7, 7, 8, 8, 8});
      check_tensor(out[2], f32, {2, 3}, iota(6));
      break;
    }
    default:
      FAIL("not a view: " << op_name(op));
  }
}

void check_slice() {
  Graph g;
  const NodeId x = add_input(g, f32, {2, 5});
  const NodeId y = add_input(g, i64, {6});
  g.add_output(add_slice(g, x, 1, 1, 4));          // x[:, 1:4]
  g.add_output(add_slice(g, x, -1, -2, 100));      // x[:, -2:] (stop clamped)
  g.add_output(add_slice(g, y, 0, 1, 6, 2));       // y[1::2]
  g.add_output(add_slice(g, x, 0, -1, 2));         // x[-1:2] is row 1
  const std::vector<HostTensor> out =
      run(g, {tensor(f32, {2, 5}, iota(10)), tensor(i64, {6}, iota(6, 10))});
  check_tensor(out[0], f32, {2, 3}, {1, 2, 3, 6, 7, 8});
  check_tensor(out[1], f32, {2, 2}, {3, 4, 8, 9});
  check_tensor(out[2], i64, {3}, {11, 13, 15});
  check_tensor(out[3], f32, {1, 5}, {5, 6, 7, 8, 9});
}

void check_concat() {
  Graph g;
  const NodeId a = add_input(g, f32, {2, 2});
  const NodeId b = add_input(g, i32, {2, 1});
  const NodeId c = add_input(g, f16, {1, 2});
  g.add_output(add_concat(g, {a, b, a}, -1));  // dtypes promote as torch.cat: f32
  g.add_output(add_concat(g, {a, c}, 0));
  g.add_output(add_concat(g, {b, b}, 0));
  const std::vector<HostTensor> out = run(g, {tensor(f32, {2, 2}, {1, 2, 3, 4}),
                                              tensor(i32, {2, 1}, {7, 8}),
                                              tensor(f16, {1, 2}, {0.5, 9})});
  check_tensor(out[0], f32, {2, 5}, {1, 2, 7, 1, 2, 3, 4, 8, 3, 4});
  check_tensor(out[1], f32, {3, 2}, {1, 2, 3, 4, 0.5, 9});
  check_tensor(out[2], i32, {4, 1}, {7, 8, 7, 8});
}

void check_arange() {
  Graph g;
  g.add_output(add_arange(g, 4, i32));
  g.add_output(add_arange(g, 3, f32));
  g.add_output(add_arange(g, 2050, f16));  // 2049 is not an f16: rounds to even, 2048
  const std::vector<HostTensor> out = run(g, {});
  check_tensor(out[0], i32, {4}, iota(4));
  check_tensor(out[1], f32, {3}, iota(3));
  CHECK(out[2].get(2049) == 2048.0);
  CHECK(out[2].get(2047) == 2047.0);
}

// C = A @ B by the definition, for row-major A[m,k], B[k,n].
std::vector<double> naive_matmul(const std::vector<double>& a, const std::vector<double>& b,
                                 int64_t m, int64_t k, int64_t n) {
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += a[static_cast<size_t>(i * k + p)] * b[static_cast<size_t>(p * n + j)];
      c[static_cast<size_t>(i * n + j)] = acc;
    }
  return c;
}

void check_matmul() {
  {
    Graph g;
    const NodeId a = add_input(g, f32, {2, 2});  // operands first: argument order is unspecified
    const NodeId b = add_input(g, f32, {2, 2});
    g.add_output(add_matmul(g, a, b));
    check_tensor(run(g, {tensor(f32, {2, 2}, {1, 2, 3, 4}), tensor(f32, {2, 2}, {5, 6, 7, 8})})[0],
                 f32, {2, 2}, {19, 22, 43, 50});
  }
  {
    // Batch dims broadcast: [2,1] with [3] -> [2,3]; A[a] is used for every b, B[b] for every a.
    Graph g;
    const NodeId a = add_input(g, f32, {2, 1, 2, 3});
    const NodeId b = add_input(g, f32, {3, 3, 2});
    g.add_output(add_matmul(g, a, b));
    const std::vector<double> av = iota(12, -3, 0.5), bv = iota(18, 1, 0.25);
    const std::vector<HostTensor> out =
        run(g, {tensor(f32, {2, 1, 2, 3}, av), tensor(f32, {3, 3, 2}, bv)});
    std::vector<double> want;
    for (int ba = 0; ba < 2; ++ba) {
      for (int bb = 0; bb < 3; ++bb) {
        const std::vector<double> a(av.begin() + 6 * ba, av.begin() + 6 * ba + 6);
        const std::vector<double> b(bv.begin() + 6 * bb, bv.begin() + 6 * bb + 6);
        for (double v : naive_matmul(a, b, 2, 3, 2)) want.push_back(v);
      }
    }
    // The first product by hand: A[0] = [[-3,-2.5,-2],[-1.5,-1,-0.5]], B[0] =
    // [[1,1.25],[1.5,1.75],[2,2.25]].
    CHECK(want[0] == -3 * 1 - 2.5 * 1.5 - 2 * 2);
    check_tensor(out[0], f32, {2, 3, 2, 2}, want);
  }
  {
    // bf16 result: 1 * 1 + (2^-8) * 1 = 1 + 2^-8 rounds to 1 in bf16.
    Graph g;
    const NodeId a = add_input(g, bf16, {1, 2});
    const NodeId b = add_input(g, bf16, {2, 1});
    g.add_output(add_matmul(g, a, b));
    check_tensor(run(g, {tensor(bf16, {1, 2}, {1, k2m8}), tensor(bf16, {2, 1}, {1, 1})})[0], bf16,
                 {1, 1}, {1});
  }
}

void check_gather() {
  {
    // torch.gather along 0: result[i][j] = x[idx[i][j]][j]; -1 is the last row, -4 wraps to
    // -1 and clamps to row 0, 7 clamps to the last row.
    Graph g;
    const NodeId x = add_input(g, f32, {3, 4});
    const NodeId idx = add_input(g, i64, {2, 4});
    g.add_output(add_gather(g, x, 0, idx));
    const std::vector<HostTensor> out =
        run(g, {tensor(f32, {3, 4}, iota(12)), tensor(i64, {2, 4}, {2, 0, 1, -1, -4, 7, -3, 1})});
    check_tensor(out[0], f32, {2, 4}, {8, 1, 6, 11, 0, 9, 2, 7});
  }
  {
    // Along the last axis with an index shorter than x on axis 0, and integer data (i32 index).
    Graph g;
    const NodeId x = add_input(g, i32, {3, 4});
    const NodeId idx = add_input(g, i32, {2, 3});
    g.add_output(add_gather(g, x, -1, idx));
    const std::vector<HostTensor> out =
        run(g, {tensor(i32, {3, 4}, iota(12, -5)), tensor(i32, {2, 3}, {3, 3, 0, -2, 1, 9})});
    check_tensor(out[0], i32, {2, 3}, {-2, -2, -5, 1, 0, 2});
  }
  CHECK(gather_position(-1, 5) == 4);
  CHECK(gather_position(-5, 5) == 0);
  CHECK(gather_position(-6, 5) == 0);
  CHECK(gather_position(5, 5) == 4);
  CHECK(gather_position(2, 5) == 2);
}

void check_update_slice() {
  {
    // Rows 1..2 of the middle axis of a [2, 4, 2] tensor, written from start 1: each of the two
    // leading rows gets its own two rows of the value.
    Graph g;
    const NodeId dst = add_input(g, f32, {2, 4, 2});
    const NodeId src = add_input(g, f32, {2, 2, 2});
    const NodeId start = add_input(g, i64, {});
    g.add_output(add_update_slice(g, dst, src, 1, start));
    const std::vector<HostTensor> out =
        run(g, {tensor(f32, {2, 4, 2}, iota(16)), tensor(f32, {2, 2, 2}, iota(8, 100)),
                tensor(i64, {}, {1})});
    check_tensor(out[0], f32, {2, 4, 2},
                 {0, 1, 100, 101, 102, 103, 6, 7, 8, 9, 104, 105, 106, 107, 14, 15});
  }
  {
    // Starts are placed as update_start says: -1 counts from the end and is then clamped so
    // that the two rows fit (row 2), 9 is clamped to the last start that fits, -7 to 0. bf16
    // data, an i32 start of shape [1], along the last axis.
    for (const auto& [start, at] :
         std::vector<std::pair<double, int64_t>>{{-1, 2}, {9, 2}, {-7, 0}, {1, 1}}) {
      INFO("start " << start);
      Graph g;
      const NodeId dst = add_input(g, bf16, {1, 4});
      const NodeId src = add_input(g, bf16, {1, 2});
      const NodeId s = add_input(g, i32, {1});
      g.add_output(add_update_slice(g, dst, src, -1, s));
      const std::vector<HostTensor> out =
          run(g, {tensor(bf16, {1, 4}, {1, 2, 3, 4}), tensor(bf16, {1, 2}, {-8, -9}),
                  tensor(i32, {1}, {start})});
      std::vector<double> want = {1, 2, 3, 4};
      want[static_cast<size_t>(at)] = -8;
      want[static_cast<size_t>(at + 1)] = -9;
      check_tensor(out[0], bf16, {1, 4}, want);
    }
  }
  CHECK(update_start(-1, 2, 4) == 2);
  CHECK(update_start(3, 1, 4) == 3);
  CHECK(update_start(4, 1, 4) == 3);
  CHECK(update_start(-9, 1, 4) == 0);
  CHECK(update_start(0, 4, 4) == 0);
}

// The generator against the published Philox4x32-10 known answers (Salmon et al., Random123's
// kat_vectors: counter words, key words -> output words).
void check_philox() {
  const fj_philox_words zero = fj_philox4x32_10(0, 0, 0, 0, 0, 0);
  CHECK(zero.w[0] == 0x6627e8d5u);
  CHECK(zero.w[1] == 0xe169c58du);
  CHECK(zero.w[2] == 0xbc57ac4cu);
  CHECK(zero.w[3] == 0x9b00dbd8u);
  const unsigned int f = 0xffffffffu;
  const fj_philox_words ones = fj_philox4x32_10(f, f, f, f, f, f);
  CHECK(ones.w[0] == 0x408f276du);
  CHECK(ones.w[1] == 0x41c83b0eu);
  CHECK(ones.w[2] == 0xa20bc7c6u);
  CHECK(ones.w[3] == 0x6d5451fdu);
  // The same vector through the element layout: counter (lo e, hi e, lo offset, hi offset),
  // key (lo seed, hi seed).
  const fj_philox_words pi = fj_random_words(0x299f31d0a4093822ull, 0x0370734413198a2eull,
                                             0x85a308d3243f6a88ull);
  CHECK(pi.w[0] == 0xd16cfe09u);
  CHECK(pi.w[1] == 0x94fdccebu);
  CHECK(pi.w[2] == 0x5001e420u);
  CHECK(pi.w[3] == 0x24126ea1u);
  CHECK(random_uniform(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull) ==
        static_cast<float>(0xd16cfe) / 16777216.0f);
}

void check_random(Op op) {
  check_philox();
  // Element 0 of (seed 0, offset 0) is the all-zero known answer.
  const double u0 = static_cast<double>(0x6627e8) / 16777216.0;
  const double u1 = static_cast<double>(0xe169c5) / 16777216.0;
  const double first = op == Op::rand ? u0
                                      : std::sqrt(-2.0 * std::log(1.0 - u0)) *
                                            std::cos(2.0 * std::numbers::pi * u1);
  Graph g;
  const int64_t n = 1 << 16;
  const NodeId stream0 = add_input(g, DType::i64, {2});
  const NodeId stream1 = add_input(g, DType::i64, {2});
  g.add_output(add_random(g, op, f32, {n}, stream0));
  g.add_output(add_random(g, op, f32, {n}, stream1));
  g.add_output(add_random(g, op, bf16, {2, 3}, stream0));
  const std::vector<HostTensor> out = run(g, {random_key(0, 0), random_key(0, 1)});
  CHECK(out[0].get(0) == static_cast<double>(static_cast<float>(first)));
  double sum = 0, squares = 0;
  int64_t same = 0;
  for (int64_t e = 0; e < n; ++e) {
    const double v = out[0].get(e);
    sum += v;
    squares += v * v;
    same += v == out[1].get(e) ? 1 : 0;
    if (op == Op::rand) CHECK((v >= 0.0 && v < 1.0));
  }
  const double mean = sum / n, variance = squares / n - mean * mean;
  CHECK(mean == Approx(op == Op::rand ? 0.5 : 0.0).margin(0.01));
  CHECK(variance == Approx(op == Op::rand ? 1.0 / 12.0 : 1.0).epsilon(0.02));
  CHECK(same < 8);  // another offset is another stream
  // A bf16 draw is the f32 draw rounded: the values depend on the position, not the shape.
  check_tensor(out[2], bf16, {2, 3},
               {round_to(bf16, out[0].get(0)), round_to(bf16, out[0].get(1)),
                round_to(bf16, out[0].get(2)), round_to(bf16, out[0].get(3)),
                round_to(bf16, out[0].get(4)), round_to(bf16, out[0].get(5))});
}

// Runs the reference checks of `op`; every op of the table has a case here (the compiler warns
// about a missing one, and the test below checks the ops the graphs actually used).
void check_op(Op op) {
  switch (op) {
    case Op::input:
    case Op::constant:
      check_sources();
      return;
    case Op::neg:
    case Op::abs:
    case Op::exp:
    case Op::log:
    case Op::sqrt:
    case Op::rsqrt:
    case Op::sin:
    case Op::cos:
    case Op::tanh:
    case Op::sigmoid:
    case Op::relu:
    case Op::gelu:
    case Op::gelu_tanh:
    case Op::silu:
    case Op::reciprocal:
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::maximum:
    case Op::minimum:
    case Op::pow:
    case Op::eq:
    case Op::ne:
    case Op::lt:
    case Op::le:
    case Op::gt:
    case Op::ge:
    case Op::where: {
      int cases = 0;
      for (const Case& c : elementwise_cases()) {
        if (c.op != op) continue;
        check_case(c);
        ++cases;
      }
      CHECK(cases > 0);
      return;
    }
    case Op::cast:
      check_casts();
      return;
    case Op::sum:
    case Op::mean:
    case Op::max:
    case Op::min:
      check_reductions(op);
      return;
    case Op::reshape:
    case Op::permute:
    case Op::expand:
      check_views(op);
      return;
    case Op::slice:
      check_slice();
      return;
    case Op::concat:
      check_concat();
      return;
    case Op::arange:
      check_arange();
      return;
    case Op::matmul:
      check_matmul();
      return;
    case Op::gather:
      check_gather();
      return;
    case Op::rand:
    case Op::randn:
      check_random(op);
      return;
    case Op::update_slice:
      check_update_slice();
      return;
  }
  FAIL("no reference check for op " << static_cast<int>(op));
}

}  // namespace

TEST_CASE("every op of the table matches hand-computed values", "[ir][interp]") {
  covered().clear();
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    INFO("op " << op_name(op));
    check_op(op);
  }
  std::set<Op> all;
  for (int i = 0; i < kNumOps; ++i) all.insert(static_cast<Op>(i));
  std::string missing;
  for (Op op : all) {
    if (covered().count(op) == 0) missing += std::string(op_name(op)) + " ";
  }
  INFO("ops never interpreted: " << missing);
  CHECK(covered() == all);
  CHECK(static_cast<int>(covered().size()) == kNumOps);
}

TEST_CASE("integer ops are exact beyond 2^53", "[ir][interp]") {
  Graph g;
  const NodeId a = add_input(g, i64, {2});
  const NodeId b = add_input(g, i64, {2});
  g.add_output(add_binary(g, Op::ne, a, b));
  g.add_output(add_binary(g, Op::add, a, b));
  g.add_output(add_reduce(g, Op::sum, a, {0}, false));
  const int64_t p53 = int64_t{1} << 53;
  const std::vector<HostTensor> out =
      interpret(g, {i64_tensor({2}, {p53 + 1, INT64_MAX}), i64_tensor({2}, {p53, 1})});
  check_tensor(out[0], boolean, {2}, {1, 1});
  CHECK(i64_at(out[1], 0) == 2 * p53 + 1);
  CHECK(i64_at(out[1], 1) == INT64_MIN);  // wraps
  CHECK(i64_at(out[2], 0) ==
        static_cast<int64_t>(static_cast<uint64_t>(p53 + 1) + static_cast<uint64_t>(INT64_MAX)));
}

TEST_CASE("i8 wraps at 8 bits, converts as a cast to i32 would, and promotes", "[ir][interp]") {
  Graph g;
  const NodeId a = add_input(g, DType::i8, {4});
  const NodeId x = add_input(g, f32, {5});
  const NodeId s = add_input(g, DType::bf16, {4});
  g.add_output(add_binary(g, Op::add, a, a));  // wraps at every node
  g.add_output(add_cast(g, x, DType::i8));     // truncates, then wraps modulo 256
  g.add_output(add_binary(g, Op::mul, a, s));  // i8 with bf16: bf16 (weight * scale)
  g.add_output(add_binary(g, Op::add, a, add_integer_constant(g, i32, 1000)));  // i32
  g.add_output(add_reduce(g, Op::max, a, {0}, false));
  g.add_output(add_reduce(g, Op::sum, a, {0}, false));  // integer sums are i64
  const std::vector<HostTensor> out =
      interpret(g, {tensor(DType::i8, {4}, {100, -100, 127, -128}),
                    tensor(f32, {5}, {300.7, -129.5, kNaN, 1e10, -0.9}),
                    tensor(DType::bf16, {4}, {0.5, 0.25, 2, 1})});
  check_tensor(out[0], DType::i8, {4}, {-56, 56, -2, 0});
  check_tensor(out[1], DType::i8, {5}, {44, 127, 0, 0, 0});
  check_tensor(out[2], DType::bf16, {4}, {50, -25, 254, -128});
  check_tensor(out[3], i32, {4}, {1100, 900, 1127, 872});
  check_tensor(out[4], DType::i8, {}, {127});
  check_tensor(out[5], i64, {}, {-1});
  // The trace text names it.
  const Graph back = parse(print(g));
  CHECK(back.node(a).dtype == DType::i8);
}

TEST_CASE("integer constants are exact beyond 2^53", "[ir][interp]") {
  Graph g;
  const NodeId a = add_input(g, i64, {2});
  g.add_output(add_binary(g, Op::add, a, add_integer_constant(g, i64, INT64_MAX)));
  g.add_output(add_integer_constant(g, i64, 9007199254740993));
  g.add_output(add_integer_constant(g, i64, INT64_MIN));
  const std::vector<HostTensor> out = interpret(g, {i64_tensor({2}, {0, 1})});
  CHECK(i64_at(out[0], 0) == INT64_MAX);
  CHECK(i64_at(out[0], 1) == INT64_MIN);  // wraps
  CHECK(i64_at(out[1], 0) == 9007199254740993);
  CHECK(i64_at(out[2], 0) == INT64_MIN);
  // A double still states a constant, converted as a cast would.
  Graph h;
  CHECK(h.node(add_constant(h, i64, -3.7)).integer == -3);
  CHECK(h.node(add_constant(h, DType::i32, 4294967297.0)).integer == 1);
}

TEST_CASE("an integer operand enters a floating op as an f32 value", "[ir][interp]") {
  // 2^24 + 1 is not an f32: it becomes 2^24 before the add (as the GPU converts it), so the sum
  // 2^24 + 0.5 rounds to 2^24, not to 2^24 + 2.
  Graph g;
  const NodeId x = add_input(g, f32, {1});
  const NodeId i = add_input(g, i32, {1});
  g.add_output(add_binary(g, Op::add, x, i));
  g.add_output(add_binary(g, Op::eq, i, x));
  const std::vector<HostTensor> out =
      interpret(g, {tensor(f32, {1}, {0.5}), tensor(i32, {1}, {16777217})});
  CHECK(out[0].get(0) == 16777216.0);
  CHECK(out[1].get(0) == 0.0);  // 2^24 vs 0.5
}

TEST_CASE("max and min reductions propagate NaN", "[ir][interp]") {
  Graph g;
  const NodeId x = add_input(g, f32, {2, 3});
  g.add_output(add_reduce(g, Op::max, x, {1}, false));
  g.add_output(add_reduce(g, Op::max, x, {0}, false));
  g.add_output(add_reduce(g, Op::min, x, {0, 1}, false));
  g.add_output(add_reduce(g, Op::sum, x, {1}, true));
  const std::vector<HostTensor> out = interpret(g, {tensor(f32, {2, 3}, {1, kNaN, 3, 4, 5, 6})});
  check_tensor(out[0], f32, {2}, {kNaN, 6});
  check_tensor(out[1], f32, {3}, {4, kNaN, 6});
  check_tensor(out[2], f32, {}, {kNaN});
  check_tensor(out[3], f32, {2, 1}, {kNaN, 15});
}

TEST_CASE("views compose: permute then reshape, expand then reduce", "[ir][interp]") {
  Graph g;
  const NodeId x = add_input(g, f32, {2, 3, 2});
  const NodeId p = add_permute(g, x, {2, 0, 1});  // [2,2,3]: p[i][j][k] = x[j][k][i]
  g.add_output(add_reshape(g, p, {4, 3}));
  const NodeId v = add_input(g, f32, {3});
  g.add_output(add_reduce(g, Op::sum, add_expand(g, v, {5, 3}), {0}, false));
  // reshape [4,3] then transpose: t[b][a] = 3a + b, times a column v[b] = b + 1.
  g.add_output(add_binary(g, Op::mul, add_permute(g, add_reshape(g, x, {4, 3}), {1, 0}),
                          add_reshape(g, v, {3, 1})));
  const std::vector<HostTensor> out =
      interpret(g, {tensor(f32, {2, 3, 2}, iota(12)), tensor(f32, {3}, {1, 2, 3})});
  // x[j][k][i] = 6j + 2k + i.
  check_tensor(out[0], f32, {4, 3}, {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11});
  check_tensor(out[1], f32, {3}, {5, 10, 15});
  check_tensor(out[2], f32, {3, 4}, {0, 3, 6, 9, 2, 8, 14, 20, 6, 15, 24, 33});
}

TEST_CASE("large tensors take the threaded paths and give the same results", "[ir][interp]") {
  // 1100 x 1024 > 2^20 elements: every loop below is split across threads.
  const int64_t rows = 1100, cols = 1024;
  std::vector<double> xv(static_cast<size_t>(rows * cols));
  uint32_t state = 12345;
  for (double& v : xv) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<double>(static_cast<float>((state >> 8) * (1.0 / 16777216.0) - 0.5));
  }
  Graph g;
  const NodeId x = add_input(g, f32, {rows, cols});
  const NodeId bias = add_input(g, f32, {cols});
  g.add_output(add_binary(g, Op::add, x, bias));
  g.add_output(add_reduce(g, Op::sum, x, {0}, false));
  g.add_output(
      add_reduce(g, Op::sum, add_permute(g, x, {1, 0}), {1}, false));  // same, other loop order
  g.add_output(add_reduce(g, Op::max, x, {1}, false));
  const std::vector<HostTensor> out =
      interpret(g, {tensor(f32, {rows, cols}, xv), tensor(f32, {cols}, iota(cols, 0, 0.5))});

  bool add_ok = true, max_ok = true, sum_ok = true;
  for (int64_t i = 0; i < rows; ++i) {
    double m = -kInf;
    for (int64_t j = 0; j < cols; ++j) {
      const double v = xv[static_cast<size_t>(i * cols + j)];
      add_ok =
          add_ok && out[0].get(i * cols + j) == round_to(f32, v + 0.5 * static_cast<double>(j));
      m = std::max(m, v);
    }
    max_ok = max_ok && out[3].get(i) == m;
  }
  for (int64_t j = 0; j < cols; ++j) {
    double s = 0;
    for (int64_t i = 0; i < rows; ++i) s += xv[static_cast<size_t>(i * cols + j)];
    sum_ok = sum_ok && out[1].get(j) == round_to(f32, s) && out[2].get(j) == out[1].get(j);
  }
  CHECK(add_ok);
  CHECK(max_ok);
  CHECK(sum_ok);

  // A batched matmul with 2 x 96 x 128 x 80 > 2^20 multiply-adds, against the definition.
  Graph mg;
  const NodeId ma = add_input(mg, f32, {2, 96, 128});
  const NodeId mb = add_input(mg, f32, {128, 80});
  mg.add_output(add_matmul(mg, ma, mb));
  const std::vector<double> av(xv.begin(), xv.begin() + 2 * 96 * 128);
  const std::vector<double> bv(xv.begin() + 50000, xv.begin() + 50000 + 128 * 80);
  const HostTensor c =
      interpret(mg, {tensor(f32, {2, 96, 128}, av), tensor(f32, {128, 80}, bv)})[0];
  bool mm_ok = true;
  for (int b = 0; b < 2; ++b) {
    const std::vector<double> a(av.begin() + b * 96 * 128, av.begin() + (b + 1) * 96 * 128);
    const std::vector<double> want = naive_matmul(a, bv, 96, 128, 80);
    for (size_t i = 0; i < want.size(); ++i) {
      mm_ok = mm_ok && c.get(static_cast<int64_t>(b * 96 * 80 + i)) == round_to(f32, want[i]);
    }
  }
  CHECK(mm_ok);
}

TEST_CASE("only what the outputs need is evaluated; outputs may repeat", "[ir][interp]") {
  Graph g;
  const NodeId unused = add_input(g, f32, {1000});
  const NodeId x = add_input(g, f32, {2});
  add_unary(g, Op::log, unused);  // dead
  const NodeId y = add_unary(g, Op::neg, x);
  g.add_output(y);
  g.add_output(add_binary(g, Op::add, y, x));
  g.add_output(y);
  const std::vector<HostTensor> out =
      interpret(g, {tensor(f32, {1000}, iota(1000)), tensor(f32, {2}, {1, 2})});
  REQUIRE(out.size() == 3);
  check_tensor(out[0], f32, {2}, {-1, -2});
  check_tensor(out[1], f32, {2}, {0, 0});
  check_tensor(out[2], f32, {2}, {-1, -2});
}

TEST_CASE("inputs that do not match the graph are rejected", "[ir][interp]") {
  Graph g;
  const NodeId a = add_input(g, f32, {2, 3});
  const NodeId b = add_input(g, f32, {3});
  g.add_output(add_binary(g, Op::add, a, b));

  REQUIRE_THROWS_AS(interpret(g, {HostTensor(f32, {2, 3})}), Error);
  REQUIRE_THROWS_WITH(interpret(g, {HostTensor(f32, {2, 3})}),
                      ContainsSubstring("the graph has 2 input(s) but 1 tensor(s) were given"));
  REQUIRE_THROWS_WITH(interpret(g, {HostTensor(f32, {2, 3}), HostTensor(i32, {3})}),
                      ContainsSubstring("input 1 is i32[3] but the graph's input %1 is f32[3]"));
  REQUIRE_THROWS_WITH(
      interpret(g, {HostTensor(f32, {3, 2}), HostTensor(f32, {3})}),
      ContainsSubstring("input 0 is f32[3,2] but the graph's input %0 is f32[2,3]"));
  HostTensor short_one(f32, {3});
  short_one.bytes.resize(8);
  REQUIRE_THROWS_WITH(interpret(g, {HostTensor(f32, {2, 3}), short_one}),
                      ContainsSubstring("input 1 (f32[3]) holds 8 bytes but needs 12"));
}

TEST_CASE("a draw reads its seed and offset from its key operand", "[ir][interp][random]") {
  // One graph for every key: the values are data. Seeds and offsets from 2^63 up are stored as
  // negative i64 and read back as the same u64.
  Graph g;
  const NodeId key = add_input(g, DType::i64, {2});
  g.add_output(add_random(g, Op::rand, f32, {3, 5}, key));
  for (const auto& [seed, offset] : {std::pair<uint64_t, uint64_t>{0xfedcba9876543210ull, 7},
                                     {7, 0xfedcba9876543210ull},
                                     {1, 2}}) {
    INFO("seed " << seed << " offset " << offset);
    const HostTensor k = random_key(seed, offset);
    CHECK(k.get(0) == static_cast<double>(static_cast<int64_t>(seed)));
    const HostTensor out = run(g, {k}).at(0);
    for (int64_t e = 0; e < 15; ++e) {
      CHECK(out.get(e) == static_cast<double>(random_uniform(seed, offset, static_cast<uint64_t>(e))));
    }
  }
  CHECK(run(g, {random_key(1, 2)})[0].bytes != run(g, {random_key(1, 3)})[0].bytes);
}
