// templates/emit: dtype tables, literals and the expression printer; see emit.h.
#include "templates/emit.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include "fusejit/error.h"
#include "ir/dtype.h"
#include "ir/host_tensor.h"
#include "ir/shape.h"

namespace fusejit::templates {

namespace {

// Indexed by DType: f32, f16, bf16, i32, i64, bool.
constexpr std::array<DTypeCode, kNumDTypes> kDTypeCodes{{
    {"float", "float", "", "", "fj_to_f32", "", ""},
    {"unsigned short", "float", "fj_f16_to_f32", "fj_f32_to_f16", "fj_to_f32", "fj_round_f16",
     "fj_store_f16_vec"},
    {"unsigned short", "float", "fj_bf16_to_f32", "fj_f32_to_bf16", "fj_to_f32", "fj_round_bf16",
     "fj_store_bf16_vec"},
    {"int", "int", "", "", "fj_to_i32", "", ""},
    {"long long", "long long", "", "", "fj_to_i64", "", ""},
    {"unsigned char", "bool", "fj_u8_to_bool", "fj_bool_to_u8", "fj_to_bool", "", ""},
}};

// Index math fits in int32 when every extent does, with room for a grid stride past the end:
// loop variables stay below 2 * 2^30.
constexpr int64_t kNarrowIndexLimit = int64_t{1} << 30;

// Approximate math is allowed when every output is stored as f16 or bf16: their coarse
// rounding hides the approximations' error (bounds in docs/numerics.md). Any f32, integer or
// bool output, or any comparison inside the kernel (its result could flip, and a `where` would
// then pick another value), keeps precise math.
FastMath fast_math_for(const ir::Graph& g, const fusion::Region& r) {
  for (ir::NodeId id : r.nodes) {
    if (ir::op_kind(g.node(id).op) == ir::OpKind::compare) return FastMath::none;
  }
  FastMath fast = FastMath::bf16;
  for (ir::NodeId id : r.outputs) {
    const DType d = g.node(id).dtype;
    if (d == DType::f16) fast = FastMath::f16;
    else if (d != DType::bf16) return FastMath::none;
  }
  return fast;
}

}  // namespace

std::string device_function(ir::Op op, FastMath fast) {
  // FastMath levels are ordered none < f16 < bf16, as FastForm is: a form allowed for f16 outputs
  // is allowed for bf16 ones.
  const ir::FastForm finest = ir::op_fast_form(op);
  const bool approximate = finest != ir::FastForm::none && fast != FastMath::none &&
                           static_cast<int>(fast) >= static_cast<int>(finest);
  return fmt::format("fj_{}{}", approximate ? "fast_" : "", ir::op_name(op));
}

const DTypeCode& dtype_code(DType dtype) { return kDTypeCodes[static_cast<size_t>(dtype)]; }

std::string wrap(std::string_view fn, const std::string& x) {
  if (fn.empty()) return x;
  return fmt::format("{}({})", fn, x);
}

std::string literal(DType dtype, double value) {
  const double v = ir::round_to(dtype, value);
  switch (dtype) {
    case DType::f32:
    case DType::f16:
    case DType::bf16: {
      const float f = static_cast<float>(v);
      if (std::isnan(f)) return "__uint_as_float(0x7fffffffu)";
      if (std::isinf(f))
        return f > 0 ? "__uint_as_float(0x7f800000u)" : "__uint_as_float(0xff800000u)";
      const std::string s = fmt::format("{:a}f", f);
      return std::signbit(f) ? "(" + s + ")" : s;
    }
    case DType::i32: {
      const auto i = static_cast<int32_t>(v);
      if (i == std::numeric_limits<int32_t>::min()) return "(-2147483647 - 1)";
      return i < 0 ? fmt::format("({})", i) : fmt::format("{}", i);
    }
    case DType::i64: {
      // round_to keeps i64 in a double; values from 2^63 up wrapped to the minimum.
      const auto i = v >= 0x1p63 ? std::numeric_limits<int64_t>::min() : static_cast<int64_t>(v);
      if (i == std::numeric_limits<int64_t>::min()) return "(-9223372036854775807LL - 1)";
      return i < 0 ? fmt::format("({}LL)", i) : fmt::format("{}LL", i);
    }
    case DType::boolean:
      return v != 0.0 ? "true" : "false";
  }
  throw InternalError("literal: unknown dtype");
}

DType accumulator_dtype(const ir::Node& reduce) {
  // Float sums and means accumulate in f32, integer and bool sums in i64 (the node's dtype);
  // max and min compare in the operand's own arithmetic type.
  if (is_floating(reduce.dtype)) return DType::f32;
  return reduce.dtype;
}

std::string_view reduce_functor(ir::Op op) {
  switch (ir::op_combine(op)) {
    case ir::Combine::sum:
      return "fj_op_sum";
    case ir::Combine::max:
      return "fj_op_max";
    case ir::Combine::min:
      return "fj_op_min";
    case ir::Combine::none:
      break;
  }
  throw InternalError(fmt::format("{} is not a reduction", ir::op_name(op)));
}

std::string reduce_identity(ir::Op op, DType acc) {
  // max starts from the lowest value of the accumulator type, min from the highest.
  const double inf = std::numeric_limits<double>::infinity();
  const ir::Combine combine = ir::op_combine(op);
  if (combine == ir::Combine::sum) return literal(acc, 0.0);
  if (combine == ir::Combine::none) {
    throw InternalError(fmt::format("{} is not a reduction", ir::op_name(op)));
  }
  const bool lowest = combine == ir::Combine::max;
  switch (acc) {
    case DType::i32:
      return lowest ? "(-2147483647 - 1)" : "2147483647";
    case DType::i64:
      return lowest ? "(-9223372036854775807LL - 1)" : "9223372036854775807LL";
    case DType::boolean:
      return lowest ? "false" : "true";
    default:
      return literal(DType::f32, lowest ? -inf : inf);
  }
}

std::string reduce_finish(const RegionInfo& info, const ir::Node& reduce, const std::string& acc,
                          int64_t count) {
  std::string v = acc;
  if (reduce.op == ir::Op::mean) {
    v = fmt::format("{} / {}", acc, literal(DType::f32, static_cast<double>(count)));
  }
  return info.round_every_node ? wrap(dtype_code(reduce.dtype).round, v) : v;
}

RegionInfo::RegionInfo(const ir::Graph& g, const fusion::Region& r, const CodegenOptions& options)
    : graph(g),
      region(r),
      inputs(r.inputs.begin(), r.inputs.end()),
      nodes(r.nodes.begin(), r.nodes.end()),
      round_every_node(options.rounding == Rounding::node),
      target(options.target) {
  int64_t biggest = 1;
  auto see = [&](ir::NodeId id) {
    if (id < 0 || static_cast<size_t>(id) >= g.size()) {
      throw InternalError(
          fmt::format("region names node %{}, which the graph ({} nodes) lacks", id, g.size()));
    }
    biggest = std::max(biggest, ir::numel(g.node(id).shape));
    for (ir::NodeId op : g.node(id).inputs) {
      if (op >= 0 && static_cast<size_t>(op) < g.size()) {
        biggest = std::max(biggest, ir::numel(g.node(op).shape));
      }
    }
  };
  for (ir::NodeId id : r.nodes) see(id);
  for (ir::NodeId id : r.inputs) see(id);
  for (ir::NodeId id : r.outputs) see(id);
  wide_index = biggest > kNarrowIndexLimit;
  fast = round_every_node ? FastMath::none : fast_math_for(g, r);
}

std::string RegionInfo::input_param(ir::NodeId id) const {
  const auto it = std::find(region.inputs.begin(), region.inputs.end(), id);
  if (it == region.inputs.end()) throw InternalError(fmt::format("%{} is not a region input", id));
  return fmt::format("in{}", it - region.inputs.begin());
}

// The element sizes of the buffers the region reads and writes, smallest and largest.
std::pair<int, int> RegionInfo::element_sizes() const {
  int smallest = 8, largest = 1;
  for (const auto* ids : {&region.inputs, &region.outputs}) {
    for (ir::NodeId id : *ids) {
      smallest = std::min(smallest, dtype_size(node(id).dtype));
      largest = std::max(largest, dtype_size(node(id).dtype));
    }
  }
  return {smallest, largest};
}

void print_signature(Printer& p, const RegionInfo& info, int block, int min_blocks) {
  const std::string bounds =
      min_blocks > 0 ? fmt::format("{}, {}", block, min_blocks) : fmt::format("{}", block);
  p.line("extern \"C\" __global__ void __launch_bounds__({}) {}(", bounds, kKernelNameToken);
  std::vector<std::string> params;
  for (size_t k = 0; k < info.region.inputs.size(); ++k) {
    const ir::Node& n = info.node(info.region.inputs[k]);
    params.push_back(fmt::format("const {}* __restrict__ in{}  // %{} {}",
                                 dtype_code(n.dtype).storage, k, info.region.inputs[k],
                                 ir::type_str(n)));
  }
  for (size_t k = 0; k < info.region.outputs.size(); ++k) {
    const ir::Node& n = info.node(info.region.outputs[k]);
    params.push_back(fmt::format("{}* __restrict__ out{}  // %{} {}", dtype_code(n.dtype).storage,
                                 k, info.region.outputs[k], ir::type_str(n)));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    // The comma goes before the comment.
    std::string& s = params[i];
    const size_t comment = s.find("  //");
    const std::string sep = i + 1 < params.size() ? "," : ") {";
    p.line("    {}{}{}", s.substr(0, comment), sep, s.substr(comment));
  }
  if (params.empty()) p.line("    ) {{");
  p.indent();
}

std::optional<std::string> Scope::find(const std::string& key) const {
  for (const Scope* s = this; s != nullptr; s = s->parent) {
    const auto it = s->memo.find(key);
    if (it != s->memo.end()) return it->second;
  }
  return std::nullopt;
}

std::string convert(DType to, DType from, const std::string& value) {
  if (dtype_code(to).arith == dtype_code(from).arith) return value;
  return wrap(dtype_code(to).convert, value);
}

void print_vector_store(Printer& decl, Printer& body, Printer& stores, DType dtype,
                        const std::string& array, const std::string& dst, int v,
                        const std::string& value) {
  const DTypeCode& code = dtype_code(dtype);
  if (!code.store_vec.empty() && v % 2 == 0) {  // narrowed in pairs when stored
    decl.line("{} {}[{}];", code.arith, array, v);
    body.line("{}[j] = {};", array, value);
    stores.line("{}({}, {});", code.store_vec, dst, array);
    return;
  }
  decl.line("{} {}[{}];", code.storage, array, v);
  body.line("{}[j] = {};", array, wrap(code.store, value));
  stores.line("fj_store_vec({}, {});", dst, array);
}

std::string load_expr(const RegionInfo& info, ir::NodeId id, const std::string& offset) {
  const DTypeCode& code = dtype_code(info.node(id).dtype);
  return wrap(code.load, fmt::format("{}[{}]", info.input_param(id), offset));
}

int vector_width(const RegionInfo& info, bool vectorize, const std::vector<int64_t>& divides) {
  return vector_width(info.min_element_size(), vectorize, divides);
}

int vector_width(int element_size, bool vectorize, const std::vector<int64_t>& divides) {
  if (!vectorize) return 1;
  int v = std::min(8, 16 / element_size);
  for (; v > 1; v /= 2) {
    bool ok = true;
    for (int64_t d : divides) ok = ok && d % v == 0;
    if (ok) break;
  }
  return v;
}

ExprEmitter::ExprEmitter(const RegionInfo& info, LeafFn leaf, InterceptFn intercept)
    : info_(info), leaf_(std::move(leaf)), intercept_(std::move(intercept)) {}

std::string ExprEmitter::key(ir::NodeId id, const Index& at) {
  return fmt::format("%{}@{}", id, offset(at));
}

std::string ExprEmitter::fresh(std::string_view prefix) {
  // "x" -> x0, x1, ...; "v12" (a node's value) -> v12, v12_1, ...
  const int n = counters_[std::string(prefix)]++;
  if (prefix.empty() || !std::isdigit(static_cast<unsigned char>(prefix.back()))) {
    return fmt::format("{}{}", prefix, n);
  }
  return n == 0 ? std::string(prefix) : fmt::format("{}_{}", prefix, n);
}

std::string ExprEmitter::value(ir::NodeId id, const Index& at, Scope& scope) {
  const std::string k = key(id, at);
  if (auto hit = scope.find(k)) return *hit;
  if (auto r = intercept_(id, at)) return *r;
  if (info_.inputs.count(id) != 0) {
    std::string v = leaf_(id, at, scope);
    scope.memo[k] = v;
    return v;
  }
  const ir::Node& n = info_.node(id);
  if (info_.nodes.count(id) == 0) {
    throw InternalError(
        fmt::format("region reads %{} ({} {}), which is neither one of its "
                    "nodes nor one of its inputs",
                    id, ir::op_name(n.op), ir::type_str(n)));
  }
  switch (ir::op_kind(n.op)) {
    case ir::OpKind::source:
      if (n.op == ir::Op::constant) return literal(n.dtype, n.value);
      throw InternalError(fmt::format("input %{} is in the region's nodes but not its inputs", id));
    case ir::OpKind::view: {
      const ir::Node& x = info_.node(n.inputs[0]);
      if (n.op == ir::Op::reshape) return value(n.inputs[0], reshape_operand(at, x.shape), scope);
      if (n.op == ir::Op::permute)
        return value(n.inputs[0], permute_operand(at, n.axes, x.shape), scope);
      return value(n.inputs[0], broadcast_operand(at, x.shape), scope);
    }
    case ir::OpKind::reduce:
      throw InternalError(
          fmt::format("%{} ({}) is read at an element its kernel does not reduce "
                      "(index {})",
                      id, ir::op_name(n.op), offset(at)));
    case ir::OpKind::matmul:
      throw InternalError(fmt::format("matmul %{} inside a generated kernel", id));
    default: {
      std::string v = elementwise(id, at, scope);
      scope.memo[k] = v;
      return v;
    }
  }
}

std::string ExprEmitter::elementwise(ir::NodeId id, const Index& at, Scope& scope) {
  const ir::Node& n = info_.node(id);
  // Operands are evaluated at the broadcast index, then brought to the op's arithmetic type:
  // the promoted type for comparisons, the result's type otherwise (the condition of `where`
  // is bool already).
  DType op_type = n.dtype;
  if (ir::op_kind(n.op) == ir::OpKind::compare) {
    op_type = ir::promote(info_.node(n.inputs[0]).dtype, info_.node(n.inputs[1]).dtype);
  }
  bool operands_in_dtype = true;  // every operand already holds a value of the node's dtype
  std::string args;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const ir::Node& x = info_.node(n.inputs[i]);
    std::string v = value(n.inputs[i], broadcast_operand(at, x.shape), scope);
    const bool is_condition = n.op == ir::Op::where && i == 0;
    if (!is_condition) {
      v = convert(op_type, x.dtype, v);
      operands_in_dtype = operands_in_dtype && x.dtype == n.dtype;
    }
    if (!args.empty()) args += ", ";
    args += v;
  }
  std::string expr;
  if (n.op == ir::Op::cast) {
    expr = args;  // the conversion above is the cast
  } else {
    expr = fmt::format("{}({})", device_function(n.op, info_.fast), args);
  }
  // Rounding::store rounds only at an explicit cast (stores round on their own); Rounding::node
  // rounds every node whose value its dtype might not hold.
  const bool round = info_.round_every_node
                         ? !(ir::op_has(n.op, ir::kKeepsValue) && operands_in_dtype)
                         : n.op == ir::Op::cast;
  if (round) expr = wrap(dtype_code(n.dtype).round, expr);
  const std::string var = fresh(fmt::format("v{}", id));
  scope.out->line("const {} {} = {};  // {}", dtype_code(n.dtype).arith, var, expr,
                  ir::op_name(n.op));
  return var;
}

}  // namespace fusejit::templates
