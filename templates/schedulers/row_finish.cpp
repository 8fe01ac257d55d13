// templates/row_finish: the finish pieces of a row kernel (row_kernel.h), after each pass: the
// thread group's reduction of its accumulators (warp shuffles, or the block through shared
// memory), then for a row spread over blocks the blocks' partials combined: a cluster's
// exchange through distributed shared memory, or split rows' partials through module-scope
// scratch, folded in order by the last block (reduction.h). Owns the order of those steps; not
// the accumulators (row_accumulate.cpp).
#include "templates/schedulers/row_kernel.h"

namespace fusejit::templates {

namespace {

// (An online sum is reduced with its maximum, a Welford variance with its mean.)
bool has_accumulator(const RowFrame& f, ir::NodeId r) {
  return f.space.online.count(r) == 0 && f.space.welford.count(r) == 0;
}

// Reduces the thread's accumulators over its group: warp shuffles, or through shared memory
// when the group is the block.
void add_group_reduce(const RowFrame& f, kir::Block& main, const std::vector<ir::NodeId>& here) {
  for (ir::NodeId r : here) {
    if (!has_accumulator(f, r)) continue;
    const kir::ExprP a = f.acc(r);
    const kir::ExprP op = kir::call(row_accumulator(f, r).functor, {});
    if (f.cfg.group > 32) {
      main.assign(a, kir::block_reduce(a, op, f.cfg.block));
    } else if (f.cfg.group > 1) {
      main.assign(a, kir::warp_reduce(a, op, 1, f.cfg.group));
    }
  }
}

// What the blocks of a cluster exchange after a pass: each reduction's block total (an online
// softmax pair as one value, under its maximum; a Welford pair under its mean).
std::vector<ClusterPartial> cluster_partials(const RowFrame& f,
                                             const std::vector<ir::NodeId>& here) {
  std::vector<ClusterPartial> out;
  for (ir::NodeId r : here) {
    if (!has_accumulator(f, r)) continue;
    const Accumulator acc = row_accumulator(f, r);
    out.push_back({f.acc(r), acc.type, acc.functor, f.info.named("fj_exchange", r)});
  }
  return out;
}

// Split rows: the last block to arrive folds the S partials of the reductions of depth `pass`
// with accumulators of their own, in order, and resets the arrival count.
kir::Block& add_split_combine(const RowFrame& f, kir::Block& main, int pass) {
  const SplitPartials& split = f.split;
  std::vector<ir::NodeId> kept;
  for (ir::NodeId r : f.space.accumulated()) {
    if (f.space.depth.at(r) == pass) kept.push_back(r);
  }
  kir::Block& row = add_split_arrival(main, kept, split);
  add_split_fold(row, f.info, kept, split, kir::lit(0), 1);
  add_split_reset(row, split);
  return row;
}

}  // namespace

// Split rows (reduction.h): the partials of row `row`, piece `s`, one value per block; thread 0
// publishes them, and in the last block folds all S of them in order.
SplitPartials split_partials(const RowFrame& f) {
  SplitPartials split;
  split.pieces = f.cfg.split;
  split.groups = f.space.rows;
  split.group = kir::var(f.vars.row);
  split.piece = kir::var(f.vars.s);
  for (ir::NodeId r : f.space.accumulated()) {
    if (f.space.pairing(r) != Pairing::none) split.paired[r] = f.space.pairing(r);
    split.accumulators[r] = f.acc(r);
  }
  split_variables(split, f.info, f.space.accumulated());
  return split;
}

kir::Block& add_row_finish(const RowFrame& f, kir::Block& main, int pass,
                           const std::vector<ir::NodeId>& here, kir::Block& cluster_slots) {
  add_group_reduce(f, main, here);
  switch (f.pieces.spread) {
    case RowSpread::block:
      return main;
    case RowSpread::cluster:
      if (!here.empty()) {
        add_cluster_exchange(cluster_slots, main, cluster_partials(f, here), f.cfg.cluster,
                             f.phase);
      }
      return main;
    case RowSpread::split:
      return add_split_combine(f, main, pass);
  }
  return main;
}

}  // namespace fusejit::templates
