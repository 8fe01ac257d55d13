// templates/row_frame: the frame of a row kernel (row_kernel.h): the row's indices, the pieces
// its layout selects, and the helpers every piece shares. Owns no statement of the kernel.
#include <fmt/format.h>

#include "fusejit/error.h"
#include "templates/schedulers/row_kernel.h"

namespace fusejit::templates {

kir::ExprP static_cast_to(std::string_view type, kir::ExprP value) {
  return kir::call(fmt::format("static_cast<{}>", type), {std::move(value)});
}

kir::ExprP conjoin(kir::ExprP a, kir::ExprP b) {
  return a ? kir::infix(std::move(a), "&&", std::move(b)) : b;
}

RowPieces row_pieces(const RegionInfo& info, const ReduceSpace& space, const RowConfig& cfg) {
  if (cfg.split > 1 && cfg.cluster > 1) {
    throw InternalError(
        fmt::format("a row split over {} blocks and a cluster of {}", cfg.split, cfg.cluster));
  }
  RowPieces p;
  p.walk = cfg.looped && !cfg.bounded ? RowWalk::strided : RowWalk::chunked;
  p.spread = cfg.cluster > 1 ? RowSpread::cluster
             : cfg.split > 1 ? RowSpread::split
                             : RowSpread::block;
  p.guards = row_guards(info, space, cfg);
  p.register_cache = cfg.cached() && cfg.chunks > 0;
  p.staged = cfg.staged;
  return p;
}

namespace {

RowVars row_vars(const RowFrame& f) {
  const auto index = [&](const char* name) { return kir::variable(f.idx, name); };
  RowVars v;
  v.row0 = index("row0");
  v.u = index("u");
  v.row = index("row");
  v.s = index("s");
  v.g = kir::variable("int", "g");
  v.c = kir::variable("int", "c");
  v.k0 = index("k0");
  v.k = index("k");
  v.j = kir::variable("int", "j");
  v.slot = index("fj_slot");
  v.in = kir::variable("bool", "fj_in");
  v.live = kir::variable("bool", "live");
  v.next = index("fj_next");
  v.staged = kir::variable("extern __shared__ __align__(16) unsigned char", "fj_staged");
  v.phase = kir::variable("int", "fj_phase");
  for (ir::NodeId r : f.space.accumulated()) {
    v.acc[r] = kir::variable(row_accumulator(f, r).type, f.info.named("a", r));
  }
  return v;
}

}  // namespace

RowFrame::RowFrame(const RegionInfo& info_in, const ReduceSpace& space_in, const RowConfig& cfg_in)
    : info(info_in),
      space(space_in),
      cfg(cfg_in),
      pieces(row_pieces(info_in, space_in, cfg_in)),
      idx(info_in.index_type()) {
  vars = row_vars(*this);
  row = make_root(vars.row, space.rows);
  k = make_lane_root(vars.k, vars.k0, space.length, cfg.v);
  const auto group_of = [&](size_t a) { return is_reduced_axis(space, a) ? size_t{1} : size_t{0}; };
  x = grouped_index(space.shape, {row, k}, group_of);
  first = grouped_index(space.shape, {row, make_zero(space.length)}, group_of);
  row_digits = {Digit{row, 1, space.rows}};
  if (pieces.staged) {  // the row the block takes next, whose inputs the cache fill stages
    x_next = grouped_index(space.shape, {make_root(vars.next, space.rows), k}, group_of);
    x_key = index_key(x);
  }
  row_key = index_key(Index{{space.rows}, {row_digits}});
  // One exchange per row: its slots alternate by row (reduction.h, add_cluster_exchange).
  if (pieces.spread == RowSpread::cluster && space.passes == 1) phase = kir::var(vars.phase);
  const kir::ExprP c = kir::var(vars.c);
  slot = cfg.v > 1 ? kir::add(kir::mul(c, kir::lit(cfg.v)), kir::var(vars.j)) : c;
  if (pieces.spread == RowSpread::split) split = split_partials(*this);
}

kir::ExprP RowFrame::rows_bound() const {
  if (cfg.looped) return kir::extent(space.rows);
  return outer_extent(info, space.rows, "the reduction's rows");
}

std::unique_ptr<RowPass> new_row_pass(ValueScope* row_scope) {
  auto p = std::make_unique<RowPass>();
  p->chunk = ValueScope{&p->prelude, row_scope, {}};
  p->lane = ValueScope{&p->body, &p->chunk, {}};
  return p;
}

}  // namespace fusejit::templates
