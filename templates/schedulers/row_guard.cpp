// templates/row_guard: the guard piece of a row kernel (row_kernel.h): which checks a row's
// layout needs, and how each walk over the row's vectors applies them. Owns the choice between
// no check, the row guard, the k guard, the end guard, a clamp and a predicate; not the
// expressions of the walk's loop (row_walk.cpp).
#include "templates/schedulers/row_kernel.h"

namespace fusejit::templates {

RowGuards row_guards(const RegionInfo& info, const ReduceSpace& space, const RowConfig& cfg) {
  RowGuards g;
  if (cfg.looped) {
    // The rows are a static coefficient times the symbols' values here (odd primes, or for
    // an aligned kernel the alignment times odd primes), so divisibility by the block's rows
    // holds at every size the kernel serves when it holds here. The row loop bounds k0.
    g.row = space.rows % cfg.rows_per_block != 0;
    // A register path holds at most `piece` elements: each vector is checked against the
    // length given at launch.
    g.end = cfg.bounded;
  } else {
    // (A dynamic kernel's rows are rows_per_outer * outer: the guard holds for every outer.)
    g.row = info.per_outer(space.rows, "the reduction's rows") % cfg.rows_per_block != 0;
    g.k = cfg.chunks * cfg.group * cfg.v != cfg.piece;
    g.end = cfg.pieces() * cfg.piece != space.length;  // the last cluster piece is short
  }
  // Rows whose last vectors some threads do not have: a register path's at every length
  // short of its bound, a static row's where its threads' vectors overrun it.
  g.predicated = cfg.bounded || (g.k && cfg.pieces() == 1);
  return g;
}

// Rows whose passes are predicated (see predicated_update): in the fill of the register cache,
// a vector past the end loads the row's last vector instead, so that no branch separates one
// vector's load from the next, and the passes compute every vector. A pass that reads a region
// input along the row besides the cache (a norm's weight) keeps a branch around each vector
// instead: computed without one, on clamped addresses, RMS norm paths over rows of 256 to
// 8,192 ran 1.3-1.6x slower on an H200 (ptxas spilled them under the paths' launch bounds). A
// static row whose passes load keeps the branch in its fill too (the clamped fill took an f32
// RMS norm over rows of 1,000 from 38 to 54 registers). A dead row's thread group (uniform)
// skips the whole fill.
VectorGuard vector_guard(const RowFrame& f, WalkUse use, bool passes_load) {
  const RowGuards& g = f.guards();
  const bool fill = use == WalkUse::fill;
  VectorGuard v;
  v.clamp = fill && (f.cfg.bounded || (g.predicated && !passes_load));
  v.predicate = g.predicated && !fill;
  v.host_live = v.clamp && g.row;
  v.branch_live = g.row && !v.clamp && !v.predicate;  // (a predicate folds `live` into fj_in)
  v.end_check = g.end && !f.cfg.bounded;
  v.k_check = g.k && !v.clamp && !v.predicate;
  // k0, the thread's vector start: declared for the checks (split rows for the check on the
  // vector's place in the piece too, cluster rows only where it is read), elsewhere kept
  // where read.
  v.declare_k0 = (v.k_check && f.pieces.spread != RowSpread::cluster) || v.end_check;
  return v;
}

// Rows whose last vectors some threads do not have (RowGuards::predicated: a register path, or
// a static row its threads' vectors overrun) compute every vector in their passes, and only
// the updates and stores are predicated on fj_in (row_walk.cpp): with the passes free of
// branches, the compiler keeps what one pass computed for the next. A plain reduction adds its
// identity for a vector past the end rather than keeping its accumulator: the compiler turns a
// select between the updated and the old accumulator back into a branch around the element's
// computation. (The exponentials of a softmax: guarding whole passes, kernels computed them
// twice, and a path ran 1.10x the static kernel's time at S=12,288 on an H200, with the same
// layout, registers and residency; the static kernel at S=10,000, 3 vectors of 8 on 512
// threads, ran 1.3x the path that serves it.)
kir::ExprP predicated_update(const RowFrame& f, kir::ExprP update, kir::ExprP unchanged) {
  return f.guards().predicated
             ? kir::select(kir::var(f.vars.in), std::move(update), std::move(unchanged))
             : update;
}

}  // namespace fusejit::templates
