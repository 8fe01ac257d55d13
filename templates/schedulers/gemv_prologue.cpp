// templates/gemv_prologue: see gemv_prologue.h; refuse_prologue (gemv.h) is here too.
#include "templates/schedulers/gemv_prologue.h"

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "templates/builders.h"
#include "templates/lower.h"
#include "templates/schedulers/reduction.h"

namespace fusejit::templates {

std::string refuse_prologue(const GemvSpec& spec, const ir::Graph& g,
                            const fusion::Region& producer) {
  GemvSpec plain = spec;
  plain.prologue = nullptr;
  if (gemv_params(plain, {}).mma)
    return "the tensor-core variant (2..16 rows of bf16/f16) reads A straight from memory";
  if (spec.transpose_a) return "A is read transposed";
  if (producer.outputs.size() != 1) return "its producer has more than one output";
  const ir::Node& a = g.node(producer.outputs[0]);
  if (a.dtype != spec.dtype || ir::numel(a.shape) != spec.m * spec.k)
    return fmt::format("its producer's output ({}) is not A", ir::type_str(a));
  for (ir::NodeId id : producer.nodes) {
    const ir::Op op = g.node(id).op;
    if (op == ir::Op::update_slice || ir::op_kind(op) == ir::OpKind::random)
      return fmt::format("its producer has {} (a write in place or a draw)", ir::op_name(op));
  }
  if (producer.kind == fusion::RegionKind::pointwise) {
    if (ir::numel(producer.shape) != spec.m * spec.k) return "its producer sweeps other shapes";
    return "";
  }
  if (producer.kind != fusion::RegionKind::normalization)
    return fmt::format("its producer is a {} region (takes pointwise or normalization)",
                       fusion::region_kind_name(producer.kind));
  if (spec.m != 1) return fmt::format("a normalization producer for M = {} (takes M = 1)", spec.m);
  if (!producer.welford.empty())
    return "its producer's reductions read one another (one pass over the row takes none)";
  // Without online pairing, a softmax's sum of exp(x - max) reads its max: two passes.
  const ReduceSpace space = analyze_reduction(RegionInfo(g, producer, {}), false);
  if (space.length != spec.k || space.rows != 1) return "its producer's rows are not A's row";
  if (space.passes != 1)
    return "its producer's reductions read one another (one pass over the row takes none)";
  return "";
}

GemvPrologueBuilder::GemvPrologueBuilder(const GemvPrologue& p)
    : info_(*p.graph, *p.region, p.codegen),
      vectorize_(p.codegen.vectorize),
      a_(p.region->outputs.at(0)) {
  if (p.region->kind == fusion::RegionKind::normalization) space_ = analyze_reduction(info_, false);
}

void GemvPrologueBuilder::add_params(kir::Function& f) const {
  for (ir::NodeId id : info_.region.inputs)
    f.params.push_back(kir::Param{info_.input_var(id), true, info_.type_str(id)});
}

int GemvPrologueBuilder::lanes(int64_t count) const {
  return vector_width(info_, vectorize_, {count, ir::numel(info_.node(a_).shape)});
}

void GemvPrologueBuilder::declare_row(kir::Block& decl) {
  for (ir::NodeId id : space_.reduces) {
    reduced_[id] =
        decl.let_mut(std::string(dtype_code(info_.node(id).dtype).arith), info_.named("rv", id));
  }
}

namespace {

// The lanes of one vector of a sweep over `count` elements: `fill`(values, at, body) is called
// once, with the element's index of `shape` (lane j of the vector at i0, i0 a multiple of v), and
// builds the lane's statements in `body`; the vector loads go before the lane loop.
template <class Fill>
void vector_lanes(kir::Block& b, const RegionInfo& info, const Values::InterceptFn& intercept,
                  const kir::ExprP& i0, int v, int64_t count, const Shape& shape, Fill fill) {
  kir::Block prelude, body;
  ValueScope outer{&prelude, nullptr, {}};
  ValueScope inner{&body, &outer, {}};
  const std::string idx(info.index_type());
  const kir::VarP i = kir::variable(idx, "pi"), j = kir::variable("int", "pj");
  LaneLoads loads(info, v, kir::var(j), prelude, body, outer);
  Values values(
      info, [&](ir::NodeId in, const Index& at, ValueScope&) { return loads.load(in, at); },
      intercept);
  const BasePtr root = v == 1 ? make_root(i, count) : make_lane_root(i, i0->var, count, v);
  fill(values, index_from_digits({Digit{root, 1, count}}, shape), inner, kir::var(j));
  b.splice(prelude);
  kir::Block& each = b.loop(j, kir::lit(0), kir::lit(v), nullptr, 1);
  each.let_if_read(i, kir::add(i0, kir::var(j)));
  each.splice(body);
}

}  // namespace

void GemvPrologueBuilder::reduce_row(kir::Block& b, int block) {
  const int64_t k = space_.length;
  const int v = lanes(k);
  const std::string idx(info_.index_type());
  for (ir::NodeId id : space_.reduces) {
    const ir::Node& n = info_.node(id);
    const ir::NodeId operand = n.inputs.at(0);
    const DType acc_dtype = accumulator_dtype(n);
    const std::string functor(reduce_functor(n.op));
    b.comment("{}: {} of the row, every block for itself", info_.value_name(id), ir::op_name(n.op));
    const kir::ExprP acc =
        b.let_mut(std::string(dtype_code(acc_dtype).arith), info_.named("racc", id),
                  kir::lit(reduce_identity(n.op, acc_dtype)));
    // Unrolled, so that several vectors' loads are in flight at once (the row is in L2).
    const auto [each, t] = b.loop(idx, info_.named("rt", id), kir::thread_index(), kir::lit(k / v),
                                  kir::lit(block), 4);
    const kir::ExprP i0 = each.let(idx, "pi0", kir::mul(t, kir::lit(v)));
    vector_lanes(each, info_, nullptr, i0, v, k, info_.node(operand).shape,
                 [&](Values& values, const Index& at, ValueScope& scope, const kir::ExprP&) {
                   const kir::ExprP x = convert_to(acc_dtype, info_.node(operand).dtype,
                                                   values.value(operand, at, scope));
                   scope.out->assign(acc, kir::call(functor + "()", {acc, x}));
                 });
    const kir::ExprP total = kir::block_reduce(acc, kir::call(functor, {}), block);
    b.assign(reduced_.at(id), finish(info_, n, convert_to(n.dtype, acc_dtype, total), k));
  }
}

void GemvPrologueBuilder::elements(kir::Block& b, const kir::ExprP& first, int count,
                                   const kir::ExprP& out) {
  const ir::Node& a = info_.node(a_);
  const int v = lanes(count);
  const std::string idx(info_.index_type());
  // (Not a structured binding: the lambda below reads the group, which C++20 forbids of one.)
  const kir::Loop group_loop = b.loop("int", "pg", kir::lit(0), kir::lit(count / v), nullptr, 1);
  kir::Block& groups = group_loop.body;
  const kir::ExprP g = group_loop.index;
  const kir::ExprP i0 = groups.let(idx, "pi0", kir::add(first, kir::mul(g, kir::lit(v))));
  const DTypeCode& code = dtype_code(a.dtype);
  vector_lanes(
      groups, info_,
      [&](ir::NodeId id, const Index&) -> kir::ExprP {
        const auto it = reduced_.find(id);
        return it == reduced_.end() ? nullptr : it->second;
      },
      i0, v, ir::numel(a.shape), a.shape,
      [&](Values& values, const Index& at, ValueScope& scope, const kir::ExprP& j) {
        const kir::ExprP stored = apply(code.load, apply(code.store, values.value(a_, at, scope)));
        scope.out->assign(kir::subscript(out, kir::add(kir::mul(g, kir::lit(v)), j)),
                          convert_to(DType::f32, a.dtype, stored));
      });
}

}  // namespace fusejit::templates
