// templates/lower: region nodes to kernel IR; see lower.h.
#include "templates/lower.h"

#include <cctype>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/dtype.h"
#include "ir/shape.h"

namespace fusejit::templates {

ValueKey value_key(ir::NodeId id, const Index& at, Held held) {
  return ValueKey{held, id, index_key(at)};
}

kir::ExprP ValueScope::find(const ValueKey& key) const {
  for (const ValueScope* s = this; s != nullptr; s = s->parent) {
    const auto it = s->memo.find(key);
    if (it != s->memo.end()) return it->second;
  }
  return nullptr;
}

Values::Values(const RegionInfo& info, LeafFn leaf, InterceptFn intercept)
    : info_(info), leaf_(std::move(leaf)), intercept_(std::move(intercept)) {}

std::string Values::fresh(std::string_view prefix) {
  // "x" -> x0, x1, ...; "v12" (a node's value) -> v12, v12_1, ...
  const int n = counters_[std::string(prefix)]++;
  if (prefix.empty() || !std::isdigit(static_cast<unsigned char>(prefix.back()))) {
    return fmt::format("{}{}", prefix, n);
  }
  return n == 0 ? std::string(prefix) : fmt::format("{}_{}", prefix, n);
}

kir::ExprP Values::value(ir::NodeId id, const Index& at, ValueScope& scope) {
  const ValueKey k = value_key(id, at);
  if (kir::ExprP hit = scope.find(k)) return hit;
  if (intercept_) {
    if (kir::ExprP held = intercept_(id, at)) return held;
  }
  if (info_.inputs.count(id) != 0) {
    kir::ExprP v = leaf_(id, at, scope);
    scope.memo[k] = v;
    return v;
  }
  const ir::Node& n = info_.node(id);
  if (info_.nodes.count(id) == 0) {
    throw InternalError(
        fmt::format("region reads %{} ({} {}), which is neither one of its nodes nor one of its "
                    "inputs",
                    id, ir::op_name(n.op), ir::type_str(n)));
  }
  switch (ir::op_kind(n.op)) {
    case ir::OpKind::source:
      if (n.op == ir::Op::constant) return kir::lit(constant_literal(n));
      if (n.op == ir::Op::arange) return scope.memo[k] = arange(id, at, scope);
      throw InternalError(fmt::format("input %{} is in the region's nodes but not its inputs", id));
    case ir::OpKind::view:
      if (n.op == ir::Op::concat) return scope.memo[k] = concat(id, at, scope);
      return view(n, at, scope);
    case ir::OpKind::random:
    case ir::OpKind::gather: {
      kir::ExprP v = n.op == ir::Op::gather ? gather(id, at, scope) : random(id, at, scope);
      scope.memo[k] = v;
      return v;
    }
    case ir::OpKind::reduce:
      throw InternalError(
          fmt::format("%{} ({}) is read at an element its kernel does not reduce (index {})", id,
                      ir::op_name(n.op), offset(at)));
    case ir::OpKind::matmul:
      throw InternalError(fmt::format("matmul %{} inside a generated kernel", id));
    case ir::OpKind::update:
      throw InternalError(
          fmt::format("update_slice %{} read inside the kernel that writes it", id));
    default: {
      kir::ExprP v = elementwise(id, at, scope);
      scope.memo[k] = v;
      return v;
    }
  }
}

Index view_operand(const ir::Node& n, const ir::Node& operand, const Index& at) {
  switch (n.op) {
    case ir::Op::reshape:
      return reshape_operand(at, operand.shape);
    case ir::Op::permute:
      return permute_operand(at, n.axes, operand.shape);
    case ir::Op::slice:
      return slice_operand(at, n.axes[0], n.start, n.step, operand.shape);
    case ir::Op::expand:
      return broadcast_operand(at, operand.shape);
    default:  // concat reads several operands: Values::concat
      throw InternalError(fmt::format("view {} has no single operand index", ir::op_name(n.op)));
  }
}

// Views are index arithmetic: the operand's value at the element the view reads.
kir::ExprP Values::view(const ir::Node& n, const Index& at, ValueScope& scope) {
  return value(n.inputs[0], view_operand(n, info_.node(n.inputs[0]), at), scope);
}

// rand, randn: ir/fj_random.cuh's function of (seed, offset, the element's row-major
// position), rounded to the node's dtype in every rounding mode, as the reference stores it.
// Seed and offset are elements 0 and 1 of the key, a region input (ir::infer_node keeps it an
// input), loaded where the draw is evaluated: the source is the same for every seed, and the
// compiler keeps the two loads of a restrict-qualified pointer out of the thread's loops.
kir::ExprP Values::random(ir::NodeId id, const Index& at, ValueScope& scope) {
  const ir::Node& n = info_.node(id);
  const ir::NodeId key = n.inputs.at(0);
  if (info_.inputs.count(key) == 0) {
    throw InternalError(fmt::format("%{} ({}) draws with key %{}, which is not a region input",
                                    id, ir::op_name(n.op), key));
  }
  auto word = [&](int k) { return kir::cast("unsigned long long", load(info_, key, kir::lit(int64_t{k}))); };
  const kir::ExprP position = kir::cast("unsigned long long", kir::group(kir::offset(at)));
  const std::string fn = n.op == ir::Op::rand ? "fj_rand" : "fj_randn";
  const kir::ExprP draw = kir::call(fn, {word(0), word(1), position});
  return scope.out->let(std::string(dtype_code(n.dtype).arith), fresh(info_.named("v", id)),
                        apply(dtype_code(n.dtype).round, draw), std::string(ir::op_name(n.op)));
}

// gather: the index tensor's value at the element (in the kernel: computed or loaded), made a
// position as ir::gather_position does (negatives count from the end once, the rest is clamped
// into [0, extent)), then the data operand read there.
kir::ExprP Values::gather(ir::NodeId id, const Index& at, ValueScope& scope) {
  const ir::Node& n = info_.node(id);
  const ir::Node& x = info_.node(n.inputs[0]);
  const size_t axis = static_cast<size_t>(n.axes.at(0));
  const int64_t extent = x.shape[axis];
  const kir::ExprP raw = value(n.inputs[1], at, scope);
  const kir::ExprP zero = kir::lit(0);
  const kir::ExprP wrapped =
      scope.out->let("long long", fresh("gw"),
                     kir::select(kir::lt(raw, zero), kir::add(raw, kir::lit(extent)), raw));
  const std::string type(info_.index_type());
  const kir::ExprP clamped = kir::select(
      kir::lt(wrapped, zero), zero,
      kir::select(kir::lt(wrapped, kir::lit(extent)), kir::cast(type, wrapped),
                  kir::lit(extent - 1)));
  const kir::ExprP position = scope.out->let(
      type, fresh("gi"), clamped, fmt::format("gather {} position", info_.named("v", id)));
  return gathered(n.inputs[0],
                  gather_operand(at, x.shape, axis, make_data_root(position->var, extent)), scope);
}

// update_slice: where element `at` of its value lands in the destination. The start is read
// once (any element of a one-element tensor), placed as ir::update_start does (a negative one
// counts from the end once, then clamped so that the write fits), and added to the element's
// coordinate along the axis; the other coordinates stay.
kir::ExprP Values::update_offset(ir::NodeId id, const Index& at, ValueScope& scope) {
  const ir::Node& n = info_.node(id);
  const ir::Node& start = info_.node(n.inputs[2]);
  const size_t axis = static_cast<size_t>(n.axes.at(0));
  const int64_t extent = n.shape[axis];
  const int64_t last = extent - info_.node(n.inputs[1]).shape[axis];  // the highest start
  const kir::ExprP raw =
      value(n.inputs[2], Index{start.shape, std::vector<Digits>(start.shape.size())}, scope);
  const kir::ExprP zero = kir::lit(0);
  const kir::ExprP wrapped =
      scope.out->let("long long", fresh("uw"),
                     kir::select(kir::lt(raw, zero), kir::add(raw, kir::lit(extent)), raw));
  const std::string type(info_.index_type());
  const kir::ExprP placed = scope.out->let(
      type, fresh("us"),
      kir::select(
          kir::lt(wrapped, zero), zero,
          kir::select(kir::lt(wrapped, kir::lit(last)), kir::cast(type, wrapped), kir::lit(last))),
      fmt::format("update {} start", info_.named("v", id)));
  const kir::ExprP position = scope.out->let(
      type, fresh("up"),
      kir::add(placed, kir::offset(axis_coordinate(at, static_cast<int64_t>(axis)))));
  return kir::offset(gather_operand(at, n.shape, axis, make_data_root(position->var, extent)));
}

// The gather's data operand at a loaded position: through the region's views to what the
// kernel reads (partition keeps computed values out: region_check), loaded per element here,
// never by the template's load hook, which may hoist a load above the position's declaration.
kir::ExprP Values::gathered(ir::NodeId id, Index at, ValueScope& scope) {
  for (;;) {
    const ir::Node& n = info_.node(id);
    if (info_.inputs.count(id) != 0) {
      return scope.out->let(std::string(dtype_code(n.dtype).arith), fresh("gx"),
                            load(info_, id, kir::offset(at)));
    }
    if (ir::op_kind(n.op) != ir::OpKind::view || n.op == ir::Op::concat) {
      return value(id, at, scope);
    }
    at = view_operand(n, info_.node(n.inputs[0]), at);
    id = n.inputs[0];
  }
}

namespace {

// parts[lo, hi) picked by the coordinate c, parts[k] ending before ends[k]: a balanced tree of
// selects, halving at each level, so that its depth (and the recursion of every walk over it:
// verify, print) grows as log2 of the operand count. Up to three operands it is the chain
//   c < end0 ? x0 : (c < end1 ? x1 : (x2))
kir::ExprP pick_operand(const kir::ExprP& c, const std::vector<kir::ExprP>& parts,
                        const std::vector<int64_t>& ends, size_t lo, size_t hi) {
  if (hi - lo == 1) return parts[lo];
  const size_t mid = lo + (hi - lo) / 2;
  kir::ExprP below = pick_operand(c, parts, ends, lo, mid);
  if (mid - lo > 1) below = kir::group(below);
  return kir::select(kir::lt(c, kir::lit(ends[mid - 1])), below,
                     kir::group(pick_operand(c, parts, ends, mid, hi)));
}

}  // namespace

// A select over index ranges: every operand is evaluated (at an element in range, see
// concat_operand) and the result's coordinate along the axis picks one (pick_operand).
kir::ExprP Values::concat(ir::NodeId id, const Index& at, ValueScope& scope) {
  const ir::Node& n = info_.node(id);
  const int64_t axis = n.axes[0];
  std::vector<kir::ExprP> parts;
  std::vector<int64_t> ends;
  int64_t offset = 0;
  for (ir::NodeId in : n.inputs) {
    const ir::Node& x = info_.node(in);
    const Index operand_at = concat_operand(at, axis, offset, x.shape);
    parts.push_back(convert_to(n.dtype, x.dtype, value(in, operand_at, scope)));
    offset += x.shape[static_cast<size_t>(axis)];
    ends.push_back(offset);
  }
  const kir::ExprP c = kir::offset(axis_coordinate(at, axis));
  return scope.out->let(std::string(dtype_code(n.dtype).arith), fresh(info_.named("v", id)),
                        pick_operand(c, parts, ends, 0, parts.size()), "concat");
}

// The element's position, converted to the node's dtype and rounded to it (as a cast of an
// integer arange would be).
kir::ExprP Values::arange(ir::NodeId id, const Index& at, ValueScope& scope) {
  const DTypeCode& code = dtype_code(info_.node(id).dtype);
  const kir::ExprP v = apply(code.round, apply(code.convert, kir::offset(at)));
  return scope.out->let(std::string(code.arith), fresh(info_.named("v", id)), v, "arange");
}

kir::ExprP Values::elementwise(ir::NodeId id, const Index& at, ValueScope& scope) {
  const ir::Node& n = info_.node(id);
  // Operands are evaluated at the broadcast index, then brought to the op's arithmetic type:
  // the promoted type for comparisons, the result's type otherwise (the condition of `where`
  // is bool already).
  DType op_type = n.dtype;
  if (ir::op_kind(n.op) == ir::OpKind::compare) {
    op_type = ir::promote(info_.node(n.inputs[0]).dtype, info_.node(n.inputs[1]).dtype);
  }
  bool operands_in_dtype = true;  // every operand already holds a value of the node's dtype
  std::vector<kir::ExprP> args;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const ir::Node& x = info_.node(n.inputs[i]);
    kir::ExprP v = value(n.inputs[i], broadcast_operand(at, x.shape), scope);
    const bool is_condition = n.op == ir::Op::where && i == 0;
    if (!is_condition) {
      v = convert_to(op_type, x.dtype, v);
      operands_in_dtype = operands_in_dtype && x.dtype == n.dtype;
    }
    args.push_back(std::move(v));
  }
  // A cast is the conversion above.
  kir::ExprP expr =
      n.op == ir::Op::cast ? args.at(0) : kir::call(device_function(n.op, info_.fast), args);
  // Rounding::store rounds only at an explicit cast (stores round on their own); Rounding::node
  // rounds every node whose value its dtype might not hold.
  const bool round = info_.round_every_node
                         ? !(ir::op_has(n.op, ir::kKeepsValue) && operands_in_dtype)
                         : n.op == ir::Op::cast;
  if (round) expr = apply(dtype_code(n.dtype).round, expr);
  return scope.out->let(std::string(dtype_code(n.dtype).arith), fresh(info_.named("v", id)), expr,
                        std::string(ir::op_name(n.op)));
}

kir::ExprP apply(std::string_view fn, kir::ExprP x) {
  if (fn.empty()) return x;
  return kir::call(std::string(fn), {std::move(x)});
}

kir::ExprP convert_to(DType to, DType from, kir::ExprP value) {
  if (dtype_code(to).arith == dtype_code(from).arith) return value;
  return apply(dtype_code(to).convert, std::move(value));
}

kir::ExprP literal_of(DType dtype, double value) { return kir::lit(literal(dtype, value)); }

kir::ExprP load(const RegionInfo& info, ir::NodeId id, kir::ExprP offset) {
  const DTypeCode& code = dtype_code(info.node(id).dtype);
  return apply(code.load, kir::subscript(kir::var(info.input_var(id)), std::move(offset)));
}

kir::ExprP finish(const RegionInfo& info, const ir::Node& reduce, kir::ExprP acc, int64_t count) {
  kir::ExprP v = std::move(acc);
  if (reduce.op == ir::Op::mean) {
    // (A row length that changes with the symbols is the kernel's argument, as a float.)
    v = kir::infix(v, "/",
                   info.symbolic(count) ? kir::cast("float", kir::extent(count))
                                        : literal_of(DType::f32, static_cast<double>(count)));
  }
  return info.round_every_node ? apply(dtype_code(reduce.dtype).round, v) : v;
}

kir::Function kernel_function(const RegionInfo& info, int block, int min_blocks) {
  kir::Function f;
  f.name = std::string(kKernelNameToken);
  f.block = block;
  f.min_blocks = min_blocks;
  for (const ir::NodeId id : info.region.inputs) {
    f.params.push_back(kir::Param{info.input_var(id), true, info.type_str(id)});
  }
  for (size_t k = 0; k < info.region.outputs.size(); ++k) {
    const ir::NodeId id = info.region.outputs[k];
    f.params.push_back(kir::Param{info.output_var(k), false,
                                  fmt::format("{} {}", info.value_name(id), info.type_str(id))});
  }
  if (info.dynamic()) {
    f.params.push_back(
        kir::Param{info.outer_var(), false,
                   "the outer extent (the dims marked ?), at most the kernel's max_outer", false});
  }
  return f;
}

kir::ExprP outer_extent(const RegionInfo& info, int64_t count, std::string_view what) {
  if (!info.dynamic()) return kir::lit(count);
  const int64_t per_outer = info.per_outer(count, what);
  const std::string idx(info.index_type());
  kir::ExprP outer = kir::var(info.outer_var());
  if (!info.wide_index) outer = kir::cast(idx, outer);  // fits: outer <= max_outer
  return per_outer == 1 ? outer : kir::mul(kir::lit(per_outer), outer);
}

void vector_store(kir::Block& decl, kir::Block& body, kir::Block& stores, DType dtype,
                  const std::string& array, kir::ExprP dst, int v, kir::ExprP value,
                  const kir::ExprP& lane) {
  const DTypeCode& code = dtype_code(dtype);
  const kir::ExprP& j = lane;
  if (!code.store_vec.empty() && v % 2 == 0) {  // narrowed in pairs when stored
    const kir::ExprP a = decl.array(std::string(code.arith), array, v);
    body.assign(kir::subscript(a, j), std::move(value));
    stores.eval(kir::call(std::string(code.store_vec), {std::move(dst), a}));
    return;
  }
  const kir::ExprP a = decl.array(std::string(code.storage), array, v);
  body.assign(kir::subscript(a, j), apply(code.store, std::move(value)));
  stores.eval(kir::store_vec(std::move(dst), a));
}

}  // namespace fusejit::templates
