// templates/emit: dtype tables, literals, op device functions and region facts; see emit.h.
#include "templates/emit.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/dtype.h"
#include "ir/host_tensor.h"
#include "ir/shape.h"
#include "templates/kir/kir.h"

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
    // Computed in a variable of the storage type: every node's value wraps to 8 bits as the
    // reference's does (C++ promotes the operands to int, and the assignment wraps).
    {"signed char", "signed char", "", "", "fj_to_i8", "", ""},
}};

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
    if (d == DType::f16)
      fast = FastMath::f16;
    else if (d != DType::bf16)
      return FastMath::none;
  }
  return fast;
}

// The region inputs that only draws (rand, randn) read: their keys.
std::set<ir::NodeId> random_keys(const ir::Graph& g, const fusion::Region& r) {
  std::set<ir::NodeId> keys, streamed;
  for (ir::NodeId id : r.nodes) {
    const ir::Node& n = g.node(id);
    const bool draw = ir::op_kind(n.op) == ir::OpKind::random;
    for (ir::NodeId in : n.inputs) (draw ? keys : streamed).insert(in);
  }
  std::set<ir::NodeId> out;
  for (ir::NodeId in : r.inputs) {
    if (keys.count(in) != 0 && streamed.count(in) == 0) out.insert(in);
  }
  return out;
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

std::string literal(DType dtype, double value) {
  if (!is_floating(dtype)) return integer_literal(dtype, ir::round_to_integer(dtype, value));
  const double v = ir::round_to(dtype, value);
  const float f = static_cast<float>(v);
  if (std::isnan(f)) return "__uint_as_float(0x7fffffffu)";
  if (std::isinf(f)) return f > 0 ? "__uint_as_float(0x7f800000u)" : "__uint_as_float(0xff800000u)";
  const std::string s = fmt::format("{:a}f", f);
  return std::signbit(f) ? "(" + s + ")" : s;
}

std::string integer_literal(DType dtype, int64_t value) {
  const int64_t i = ir::wrap_integer(dtype, value);
  switch (dtype) {
    case DType::i32:
      if (i == std::numeric_limits<int32_t>::min()) return "(-2147483647 - 1)";
      return i < 0 ? fmt::format("({})", i) : fmt::format("{}", i);
    case DType::i64:
      // -9223372036854775808LL would be a negated literal too large for long long.
      if (i == std::numeric_limits<int64_t>::min()) return "(-9223372036854775807LL - 1)";
      return i < 0 ? fmt::format("({}LL)", i) : fmt::format("{}LL", i);
    case DType::boolean:
      return i != 0 ? "true" : "false";
    case DType::i8:
      return i < 0 ? fmt::format("({})", i) : fmt::format("{}", i);
    default:
      throw InternalError(fmt::format("integer_literal of {}", dtype_name(dtype)));
  }
}

std::string constant_literal(const ir::Node& constant) {
  return is_floating(constant.dtype) ? literal(constant.dtype, constant.value)
                                     : integer_literal(constant.dtype, constant.integer);
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
    case DType::i8:
      return lowest ? "(-128)" : "127";
    default:
      return literal(DType::f32, lowest ? -inf : inf);
  }
}

RegionInfo::RegionInfo(const ir::Graph& g, const fusion::Region& r, const CodegenOptions& options)
    : graph(g),
      region(r),
      inputs(r.inputs.begin(), r.inputs.end()),
      nodes(r.nodes.begin(), r.nodes.end()),
      round_every_node(options.rounding == Rounding::node),
      target(options.target),
      stage_rows(options.stage_rows) {
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
  for (size_t k = 0; k < r.inputs.size(); ++k) {
    input_position_.emplace(r.inputs[k], k);
    input_vars_.push_back(kir::variable(std::string(dtype_code(g.node(r.inputs[k]).dtype).storage),
                                        fmt::format("in{}", k)));
  }
  for (size_t k = 0; k < r.outputs.size(); ++k) {
    output_vars_.push_back(kir::variable(
        std::string(dtype_code(g.node(r.outputs[k]).dtype).storage), fmt::format("out{}", k)));
  }
  outer_var_ = kir::variable("long long", "fj_outer");
  for (size_t k = 0; k < r.nodes.size(); ++k) node_position_.emplace(r.nodes[k], k);
  fast = round_every_node ? FastMath::none : fast_math_for(g, r);
  keys = random_keys(g, r);
}

const VarP& RegionInfo::input_var(ir::NodeId id) const {
  const auto it = input_position_.find(id);
  if (it == input_position_.end()) {
    throw InternalError(fmt::format("%{} is not a region input", id));
  }
  return input_vars_[it->second];
}

std::string RegionInfo::value_name(ir::NodeId id) const {
  return input_position_.count(id) != 0 ? input_var(id)->name : named("v", id);
}

std::string RegionInfo::named(std::string_view prefix, ir::NodeId id) const {
  const auto it = node_position_.find(id);
  if (it == node_position_.end()) {
    throw InternalError(fmt::format("%{} is not a node of the region", id));
  }
  return fmt::format("{}{}", prefix, it->second);
}

void RegionInfo::make_dynamic(const DynamicSizes& sizes) { sizes_ = &sizes; }

bool RegionInfo::symbolic(int64_t count) const {
  if (sizes_ == nullptr || count == 0) return false;
  return std::any_of(sizes_->symbols.begin(), sizes_->symbols.end(),
                     [count](int64_t v) { return v > 1 && count % v == 0; });
}

bool RegionInfo::fixed_per_outer(int64_t count) const {
  return !dynamic() || (count % sizes_->outer == 0 && !symbolic(count / sizes_->outer));
}

int64_t RegionInfo::per_outer(int64_t count, std::string_view what) const {
  if (!dynamic()) return count;
  if (count % sizes_->outer != 0) {
    throw NotSizeIndependent(fmt::format("{} ({}) is not a multiple of the outer extent ({})", what,
                                         count, sizes_->outer));
  }
  if (symbolic(count / sizes_->outer)) {
    throw NotSizeIndependent(
        fmt::format("{} per unit of the outer extent ({} of {}) change with the sizes", what,
                    count / sizes_->outer, count));
  }
  return count / sizes_->outer;
}

int64_t RegionInfo::fixed_extent(int64_t count, std::string_view what) const {
  if (symbolic(count)) {
    throw NotSizeIndependent(
        fmt::format("{} ({}) change(s) with the sizes, and the kernel would be built on its value",
                    what, count));
  }
  return count;
}

std::string RegionInfo::type_str(ir::NodeId id) const {
  const ir::Node& n = node(id);
  if (!dynamic()) return ir::type_str(n);
  std::string dims;
  for (size_t a = 0; a < n.shape.size(); ++a) {
    if (a > 0) dims += ",";
    dims += symbolic(n.shape[a]) ? "?" : std::to_string(n.shape[a]);
  }
  return fmt::format("{}[{}]", dtype_name(n.dtype), dims);
}

// The element sizes of the buffers the region reads and writes, smallest and largest.
std::pair<int, int> RegionInfo::element_sizes() const {
  int smallest = 8, largest = 1;
  for (const auto* ids : {&region.inputs, &region.outputs}) {
    for (ir::NodeId id : *ids) {
      if (keys.count(id) != 0) continue;
      smallest = std::min(smallest, dtype_size(node(id).dtype));
      largest = std::max(largest, dtype_size(node(id).dtype));
    }
  }
  return {smallest, largest};
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

}  // namespace fusejit::templates
