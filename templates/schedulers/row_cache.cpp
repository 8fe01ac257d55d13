// templates/row_cache: the row-storage pieces of a row kernel (row_kernel.h): the register
// cache that holds the row's values several passes read (so that each row is read from DRAM
// once), and the shared-memory stages that copy the next row's inputs while this row's passes
// run (cp.async). Owns which values they hold and their declarations; not the walk that fills
// them (row_walk.cpp) nor when (row_kernel.cpp).
#include <algorithm>

#include <fmt/format.h>

#include "templates/schedulers/row_kernel.h"

namespace fusejit::templates {

RegisterCache::RegisterCache(const RowFrame& f, std::set<ir::NodeId> cacheable, int64_t entries)
    : f_(f), cacheable_(std::move(cacheable)) {
  max_entries_ = f.pieces.register_cache ? kCacheBudget / (f.cfg.chunks * f.cfg.v) : 0;
  if (entries >= 0) max_entries_ = std::min(max_entries_, entries);
}

kir::ExprP RegisterCache::element(ir::NodeId id, const Index& at, Values& values) {
  if (cacheable_.count(id) == 0 || !uses(at, f_.row) || !uses(at, f_.k)) return nullptr;
  const ValueKey key = value_key(id, at);
  auto it = index_.find(key);
  if (it == index_.end()) {
    if (static_cast<int64_t>(entries_.size()) >= max_entries_) return nullptr;
    const kir::VarP array =
        kir::variable(std::string(dtype_code(f_.info.node(id).dtype).arith), values.fresh("cache"));
    entries_.push_back({id, at, array});
    it = index_.emplace(key, array).first;
  }
  return kir::subscript(kir::var(it->second), f_.slot);
}

bool RegisterCache::holds(ir::NodeId id) const { return index_.count(value_key(id, f_.x)) != 0; }

// An input is staged while the stages fit the shared memory that one block per SM leaves.
kir::ExprP RowStages::slots(ir::NodeId id, const Index& at) {
  if (!f_.pieces.staged || !(index_key(at) == f_.x_key)) return nullptr;
  for (const Stage& s : stages_) {
    if (s.id == id) return kir::var(s.buffer);
  }
  const ir::Node& n = f_.info.node(id);
  const int64_t bytes = f_.cfg.chunks * f_.cfg.group * f_.cfg.v * dtype_size(n.dtype);
  constexpr int64_t kKeptShared = 16 * 1024;  // the block's reductions, the system's reserve
  if (bytes_ + bytes > f_.info.target.shared_per_sm - kKeptShared) return nullptr;
  const std::string storage(dtype_code(n.dtype).storage);
  stages_.push_back({id, kir::variable(storage + "*", fmt::format("fj_stage{}", stages_.size())),
                     storage, bytes_});
  bytes_ += bytes;
  return kir::var(stages_.back().buffer);
}

void RowStages::add_copies(kir::Block& prelude, const Index& at) const {
  for (const Stage& s : stages_) {
    const kir::ExprP src = kir::add(kir::var(f_.info.input_var(s.id)), kir::offset(at, true));
    prelude.eval(kir::call(fmt::format("fj_stage_vec<{}, {}>", s.storage, f_.cfg.v),
                           {kir::add(kir::var(s.buffer), kir::var(f_.vars.slot)), src}));
  }
}

// Staged rows: the fill reads this row's inputs from shared memory, where the previous row's
// fill had them copied (a block's first row copies its own), and then has the next row's
// copied, which land while this row's passes run.
kir::Block RowStages::around_fill(kir::Block fill, kir::Block this_row, kir::Block next_row) const {
  const std::string& idx = f_.idx;
  // (Clusters take rows by cluster: every block of one takes the same rows.)
  const bool cluster = f_.pieces.spread == RowSpread::cluster;
  const kir::ExprP first =
      static_cast_to(idx, cluster ? kir::call("fj_cluster_id", {}) : kir::block_index());
  const kir::ExprP stride =
      static_cast_to(idx, cluster ? kir::call("fj_cluster_count", {}) : kir::grid_blocks());
  kir::Block out;
  out.comment("the row's inputs, staged in shared memory by the block's previous row");
  const kir::ExprP row = kir::var(f_.vars.row);
  out.branch(kir::infix(row, "==", first)).splice(this_row);
  out.eval(kir::call("fj_stage_wait", {}));
  out.splice(fill);
  out.comment("the next row's inputs, copied while this row's passes run");
  const kir::ExprP next = out.let(f_.vars.next, kir::add(row, stride));
  out.branch(kir::lt(next, f_.rows_bound())).splice(next_row);
  return out;
}

void RowStages::declare(kir::Block& body) const {
  if (stages_.empty()) return;
  const kir::ExprP staged = body.array(f_.vars.staged, {});
  for (const Stage& s : stages_) {
    body.let_mut(s.buffer, kir::call(fmt::format("reinterpret_cast<{}*>", s.storage),
                                     {kir::add(staged, kir::lit(s.offset))}));
  }
}

}  // namespace fusejit::templates
