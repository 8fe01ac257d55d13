// templates/row_accumulate: the accumulate piece of a row kernel (row_kernel.h): each
// reduction's accumulator and its update per element. A plain reduction folds its functor; the
// maximum of an online softmax pair (ReduceSpace::online) accumulates (max, sum) together in
// an fj_max_sum, the mean of a Welford pair (ReduceSpace::welford) (count, mean, M2) in an
// fj_welford; the sum and the variance have no accumulator of their own. Owns the Welford
// variants (streamed relative to a shift, or exact from the register cache); not the
// reductions over threads (row_finish.cpp).
#include <algorithm>

#include "templates/schedulers/row_kernel.h"

namespace fusejit::templates {

Accumulator row_accumulator(const RowFrame& f, ir::NodeId r) {
  return accumulator_of(f.info, r, f.space.pairing(r));
}

// A Welford mean whose operand is in the register cache is accumulated exactly instead of by
// Welford's update: this pass counts and adds up the values, add_deviations then adds their
// squared deviations.
void RowAccumulators::add(kir::Block& main, RowPass& p, ir::NodeId r) {
  const ReduceSpace& space = f_.space;
  if (space.online.count(r) != 0 || space.welford.count(r) != 0) return;
  const ir::Node& n = f_.info.node(r);
  const ir::Node& x = f_.info.node(n.inputs[0]);
  kir::ExprP v =
      convert_to(accumulator_dtype(n), x.dtype, values_.value(n.inputs[0], f_.x, p.lane));
  const Accumulator acc = row_accumulator(f_, r);
  const kir::ExprP a = main.let_mut(f_.vars.acc.at(r), kir::lit(acc.identity));
  std::string functor = acc.functor;
  if (space.pairing(r) == Pairing::welford) {
    if (cache_.holds(n.inputs[0])) {
      functor = "fj_op_count_sum";
      exact_.push_back(r);
    } else {
      v = kir::infix(v, "-", welford_shift(r));
    }
  }
  if (f_.guards().predicated && space.pairing(r) == Pairing::none) {
    // (A vector past the end adds the identity: see predicated_update.)
    p.body.assign(a, kir::call(functor + "()",
                               {a, kir::select(kir::var(f_.vars.in), v, kir::lit(acc.identity))}));
    return;
  }
  p.body.assign(a, predicated_update(f_, kir::call(functor + "()", {a, v}), a));
}

// The shift of a streamed Welford mean r: its operand at the row's first element, loaded once
// per row. Partial means of the values less the shift stay near 0 when the row's mean is large
// against its spread, where f32 would round partial means of the values themselves to the
// mean's precision (x = 1e4 + N(0, 1): 2^-10), and Chan's update would carry that error into M2
// (a relative 1e-5 to 1e-4 there). Rows held in registers go without: the shift's register is
// the one their kernels do not have (ptxas spills f32 layer norms of 4096 and 16384 with it).
kir::ExprP RowAccumulators::welford_shift(ir::NodeId r) {
  if (const auto it = shift_.find(r); it != shift_.end()) return it->second;
  const ir::NodeId x = f_.info.node(r).inputs[0];
  const kir::ExprP k = values_.value(x, f_.first, row_scope_);
  shift_[r] = k;
  return k;
}

std::vector<ir::NodeId> RowAccumulators::exact_among(const std::vector<ir::NodeId>& here) const {
  std::vector<ir::NodeId> out;
  for (ir::NodeId r : here) {
    if (exact(r)) out.push_back(r);
  }
  return out;
}

bool RowAccumulators::exact(ir::NodeId mean) const {
  return std::find(exact_.begin(), exact_.end(), mean) != exact_.end();
}

// The Welford means held exactly: their sums turned into means, and one more walk over the
// register cache adding each value's squared deviation from its mean.
void RowAccumulators::add_deviations(kir::Block& main, RowPass& p,
                                     const std::vector<ir::NodeId>& means) {
  for (ir::NodeId r : means) {
    const kir::ExprP a = f_.acc(r);
    main.assign(a, kir::call("fj_welford_center", {a}));
    const ir::NodeId x = f_.info.node(r).inputs[0];
    p.body.assign(a,
                  predicated_update(
                      f_, kir::call("fj_op_deviation()", {a, values_.value(x, f_.x, p.lane)}), a));
  }
}

kir::ExprP RowAccumulators::unshifted(ir::NodeId r, kir::ExprP value) const {
  if (const auto shift = shift_.find(r); shift != shift_.end()) {
    return kir::add(shift->second, value);
  }
  return value;
}

}  // namespace fusejit::templates
