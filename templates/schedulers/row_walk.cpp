// templates/row_walk: the row-walk piece of a row kernel (row_kernel.h): the loop over a
// thread's vectors of the row around one pass's statements, strided up to a length given at
// launch or chunked with a compile-time trip count, with the checks its VectorGuard asks for.
// Owns the loop variables c, k0, k, j and fj_slot and fj_in; not which checks apply
// (row_guard.cpp).
#include "templates/schedulers/row_kernel.h"

namespace fusejit::templates {

namespace {

// Thread g's vector c of its piece: ((c * G + g) * V), the place of the vector's first element
// in the row's piece (the whole row unless rows are split).
kir::ExprP vector_within(const RowFrame& f) {
  const kir::ExprP c = static_cast_to(f.idx, kir::var(f.vars.c));
  return f.cfg.group > 1
             ? kir::mul(
                   kir::group(kir::add(kir::mul(c, kir::lit(f.cfg.group)), kir::var(f.vars.g))),
                   kir::lit(f.cfg.v))
             : kir::mul(c, kir::lit(f.cfg.v));
}

// (A vector within every row the code sees: the unrolled loop folds this.)
kir::ExprP whole_vector(const RowFrame& f) {
  return kir::lt(kir::var(f.vars.c), kir::lit(f.cfg.full_chunks));
}

// k0, the vector's start in the row: its place in the piece, after the pieces before it;
// clamped to the row's last vector in a clamped fill.
kir::ExprP vector_start(const RowFrame& f, const VectorGuard& guard, const kir::ExprP& within) {
  kir::ExprP at = f.pieces.spread != RowSpread::block
                      ? kir::add(kir::mul(kir::var(f.vars.s), kir::lit(f.cfg.piece)), within)
                      : within;
  if (!guard.clamp) return at;
  // (The vector width divides the length at every size the kernel serves.)
  const kir::ExprP last =
      f.cfg.bounded
          ? static_cast_to(f.idx, kir::infix(kir::extent(f.space.length), "-", kir::lit(f.cfg.v)))
          : kir::lit(f.space.length - f.cfg.v);
  at = kir::call("min", {at, last});
  if (f.cfg.full_chunks > 0) at = kir::select(whole_vector(f), within, at);
  return at;
}

// Declares fj_in where the walk is predicated, and returns the condition each vector's
// statements run under (null: none).
kir::ExprP vector_condition(kir::Block& chunk, const RowFrame& f, const VectorGuard& guard,
                            const RowPass& p, const kir::ExprP& within) {
  kir::ExprP cond;
  if (guard.predicate) {
    // (A dead row's thread group is uniform: its values are computed, never kept.)
    kir::ExprP in =
        kir::lt(within, f.cfg.bounded ? kir::extent(f.space.length) : kir::lit(f.cfg.piece));
    if (f.cfg.full_chunks > 0) in = kir::group(kir::infix(whole_vector(f), "||", in));
    if (f.guards().row) in = conjoin(kir::var(f.vars.live), in);
    const kir::ExprP fj_in = chunk.let(f.vars.in, in);
    if (p.loads) cond = fj_in;
  } else if (guard.branch_live) {
    cond = kir::var(f.vars.live);
  }
  const kir::ExprP k0 = kir::var(f.vars.k0);
  if (guard.k_check) {
    const kir::ExprP at = f.pieces.spread != RowSpread::block ? within : k0;
    cond = conjoin(cond, kir::lt(at, kir::lit(f.cfg.piece)));
  }
  if (guard.end_check) cond = conjoin(cond, kir::lt(k0, kir::lit(f.space.length)));
  return cond;
}

// The thread's C vectors of its piece, a compile-time count (unrolled up to
// kMaxUnrolledChunks); k0 and k are declared where the statements read them (or a check needs
// k0).
void add_chunked_walk(kir::Block& out, const RowPass& p, const RowFrame& f,
                      const VectorGuard& guard) {
  kir::Block& host = guard.host_live ? out.branch(kir::var(f.vars.live)) : out;
  kir::Block& chunk = host.loop(f.vars.c, kir::lit(0), kir::lit(f.cfg.chunks), nullptr,
                                f.cfg.chunks <= kMaxUnrolledChunks ? 1 : 4);
  const kir::ExprP within = vector_within(f);
  const kir::ExprP at = vector_start(f, guard, within);
  const kir::ExprP k0 =
      guard.declare_k0 ? chunk.let(f.vars.k0, at) : chunk.let_if_read(f.vars.k0, at);
  // A staged input's slot: the thread's vector of the row, never clamped, so that no two
  // threads share a slot (RowConfig::staged).
  chunk.let_if_read(f.vars.slot, within);
  const kir::ExprP cond = vector_condition(chunk, f, guard, p, within);
  kir::Block& live = cond ? chunk.branch(cond) : chunk;
  live.splice(p.prelude);
  // (No lane loop around nothing: the copies that stage a row have no per-lane statements.)
  kir::Block& lanes = f.cfg.v > 1 && !p.body.empty()
                          ? live.loop(f.vars.j, kir::lit(0), kir::lit(f.cfg.v), nullptr, 1)
                          : live;
  lanes.let_if_read(f.vars.k, f.cfg.v > 1 ? kir::add(k0, kir::var(f.vars.j)) : k0);
  lanes.splice(p.body);
  (guard.predicate && !p.loads && !p.stores.empty() ? live.branch(kir::var(f.vars.in)) : live)
      .splice(p.stores);
}

// A row length given at launch: thread g's vectors start at k0 = (g + G * c) * V, for every
// c that keeps k0 below the length (the loop unrolled by 4 so that loads overlap).
void add_strided_walk(kir::Block& out, const RowPass& p, const RowFrame& f,
                      const VectorGuard& guard) {
  kir::ExprP first = kir::lit(0);
  if (f.cfg.group > 1) {
    const kir::ExprP g = kir::var(f.vars.g);
    first = f.cfg.v > 1 ? kir::mul(g, kir::lit(f.cfg.v)) : g;
  }
  const auto [chunk, k0] =
      out.loop(f.vars.k0, first, kir::extent(f.space.length), kir::lit(f.cfg.group * f.cfg.v), 4);
  kir::Block& live = guard.branch_live ? chunk.branch(kir::var(f.vars.live)) : chunk;
  live.splice(p.prelude);
  kir::Block& lanes =
      f.cfg.v > 1 ? live.loop(f.vars.j, kir::lit(0), kir::lit(f.cfg.v), nullptr, 1) : live;
  lanes.let_if_read(f.vars.k, f.cfg.v > 1 ? kir::add(k0, kir::var(f.vars.j)) : k0);
  lanes.splice(p.body);
  live.splice(p.stores);
}

}  // namespace

void add_row_walk(kir::Block& out, const RowPass& p, const RowFrame& f, const VectorGuard& guard) {
  switch (f.pieces.walk) {
    case RowWalk::strided:
      return add_strided_walk(out, p, f, guard);
    case RowWalk::chunked:
      return add_chunked_walk(out, p, f, guard);
  }
}

}  // namespace fusejit::templates
