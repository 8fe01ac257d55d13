// templates/reduction: analysis shared by the reduction and normalization templates.
//
// A region of kind reduction or normalization holds reduce nodes that all reduce the same
// shape over the same axes, the elementwise prologue feeding them, and what consumes their
// results. Pass s of a kernel computes the reductions of depth s (a reduction reading the
// result of another, like layer norm's variance reading the mean, is one deeper); an output
// with one value per element is written in the first pass after every reduction it reads.
//
// Row-style (rowwise.cpp) handles every case; column-style (column.cpp) takes single-pass
// reductions over leading or middle axes (online softmax pairs included: they are one pass),
// where a row-style kernel would read with a stride. Which one a region gets is the registry's
// (registry.h): the column scheduler is asked first.
#include "templates/schedulers/reduction.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusejit/error.h"
#include "fusion/online_softmax.h"
#include "fusion/welford.h"
#include "ir/shape.h"
#include "templates/builders.h"

namespace fusejit::templates {

namespace {

// The max M when `sum` is sum(exp(X - M)) with M = max(X) over the same axes, the pattern of
// softmax, log-softmax and logsumexp (fusion/online_softmax.h); else -1. Then one pass can
// accumulate both: m' = max(m, x), s' = s e^(m - m') + e^(x - m'). Only where intermediates stay
// f32 (Rounding::store): with per-node rounding the sum would not be the reference's.
ir::NodeId online_partner(const RegionInfo& info, ir::NodeId sum) {
  if (info.round_every_node) return -1;
  return fusion::online_pair(info.graph, sum, [&](ir::NodeId id) {
           return info.nodes.count(id) != 0;
         }).max;
}

// The mean M when the region lists `variance` in a mean/variance pair (Region::welford); else
// -1. The pair is checked against the pattern (fusion/welford.h), so that a region built by
// hand cannot pair values that are not a mean and the variance around it.
ir::NodeId welford_partner(const RegionInfo& info, ir::NodeId variance) {
  for (const fusion::WelfordPair& p : info.region.welford) {
    if (p.variance != variance) continue;
    const fusion::WelfordPair found = fusion::welford_pair(
        info.graph, variance, [&](ir::NodeId id) { return info.nodes.count(id) != 0; });
    if (!(found == p)) {
      throw InternalError(fmt::format(
          "the region pairs mean %{} with variance %{}, which is not a variance around it",
          p.mean, p.variance));
    }
    return p.mean;
  }
  return -1;
}

// The layout, from the pattern of kept (K) and reduced (R) axes, extent-1 axes ignored and runs
// merged; for the column layout, the kept elements before and after the reduced block.
void classify_layout(ReduceSpace& space) {
  std::string pattern;
  for (size_t a = 0; a < space.shape.size(); ++a) {
    if (space.shape[a] == 1) continue;
    const char c = is_reduced_axis(space, a) ? 'R' : 'K';
    if (pattern.empty() || pattern.back() != c) pattern.push_back(c);
  }
  if (pattern.empty() || pattern == "K" || pattern == "R" || pattern == "KR") {
    space.layout = ReduceLayout::row;
  } else if (pattern == "RK" || pattern == "KRK") {
    space.layout = ReduceLayout::column;
    bool seen_reduced = false;
    for (size_t a = 0; a < space.shape.size(); ++a) {
      if (space.shape[a] == 1) continue;
      if (is_reduced_axis(space, a))
        seen_reduced = true;
      else
        (seen_reduced ? space.suffix : space.prefix) *= space.shape[a];
    }
  } else {
    space.layout = ReduceLayout::generic;
  }
}

}  // namespace

bool is_reduced_axis(const ReduceSpace& space, size_t axis) {
  return std::binary_search(space.axes.begin(), space.axes.end(), static_cast<int64_t>(axis));
}

bool ReduceSpace::is_paired_max(ir::NodeId r) const {
  return std::any_of(online.begin(), online.end(), [&](const auto& pair) { return pair.second == r; });
}

Pairing ReduceSpace::pairing(ir::NodeId r) const {
  if (is_paired_max(r)) return Pairing::max_sum;
  const bool mean = std::any_of(welford.begin(), welford.end(),
                                [&](const auto& pair) { return pair.second == r; });
  return mean ? Pairing::welford : Pairing::none;
}

std::vector<ir::NodeId> ReduceSpace::accumulated() const {
  std::vector<ir::NodeId> out;
  for (ir::NodeId r : reduces) {
    if (online.count(r) == 0 && welford.count(r) == 0) out.push_back(r);
  }
  return out;
}

Accumulator accumulator_of(const RegionInfo& info, ir::NodeId r, Pairing pairing) {
  const ir::Node& n = info.node(r);
  const DType acc = accumulator_dtype(n);
  switch (pairing) {
    case Pairing::max_sum:
      return {"fj_max_sum", fmt::format("{{{}, 0.0f}}", reduce_identity(n.op, acc)),
              fmt::format("fj_op_max_sum<{}>", info.fast != FastMath::none ? "true" : "false"),
              2 * dtype_size(acc)};
    case Pairing::welford:
      return {"fj_welford", "{0.0f, 0.0f, 0.0f}", "fj_op_welford", 3 * dtype_size(acc)};
    case Pairing::none:
      break;
  }
  return {std::string(dtype_code(acc).arith), reduce_identity(n.op, acc),
          std::string(reduce_functor(n.op)), dtype_size(acc)};
}

kir::ExprP reduced_value(const RegionInfo& info, const ReduceSpace& space, ir::NodeId r,
                         int64_t count, const std::function<kir::ExprP(ir::NodeId)>& acc) {
  const ir::Node& n = info.node(r);
  if (const auto it = space.online.find(r); it != space.online.end()) {
    return finish(info, n, kir::call("fj_max_sum_total", {acc(it->second)}), count);
  }
  if (const auto it = space.welford.find(r); it != space.welford.end()) {
    return finish(info, n, kir::member(acc(it->second), "m2"), count);
  }
  switch (space.pairing(r)) {
    case Pairing::max_sum:
      return finish(info, n, kir::member(acc(r), "m"), count);
    case Pairing::welford:  // the mean itself (f32: nothing to round)
      return kir::member(acc(r), "m");
    case Pairing::none:
      break;
  }
  return finish(info, n, acc(r), count);
}

ReduceSpace analyze_reduction(const RegionInfo& info, bool online) {
  ReduceSpace space;
  const fusion::Region& region = info.region;
  // Depths, in the region's topological order: reach = deepest reduce a value depends on.
  std::map<ir::NodeId, int>& reach = space.reach;
  auto reach_of = [&](ir::NodeId id) {
    const auto it = reach.find(id);
    return it == reach.end() ? 0 : it->second;
  };
  std::vector<ir::NodeId> order = region.nodes;
  std::sort(order.begin(), order.end());  // node ids are topological
  for (ir::NodeId id : order) {
    if (info.inputs.count(id) != 0) continue;
    const ir::Node& n = info.node(id);
    int r = 0;
    for (ir::NodeId op : n.inputs) r = std::max(r, reach_of(op));
    if (ir::op_kind(n.op) == ir::OpKind::reduce) {
      const ir::Node& x = info.node(n.inputs[0]);
      if (space.reduces.empty()) {
        space.shape = x.shape;
        space.axes = n.axes;
      } else if (x.shape != space.shape || n.axes != space.axes) {
        throw InternalError(fmt::format(
            "region reduces {} over axes [{}] and {} over axes [{}] (%{}); one kernel reduces "
            "one shape over one set of axes",
            ir::shape_str(space.shape), fmt::join(space.axes, ","), ir::shape_str(x.shape),
            fmt::join(n.axes, ","), id));
      }
      space.reduces.push_back(id);
      space.depth[id] = r + 1;
      r += 1;
      if (const ir::NodeId m = online ? online_partner(info, id) : -1; m >= 0) {
        space.online[id] = m;
        space.depth[id] = r = space.depth.at(m);
      }
      if (const ir::NodeId m = welford_partner(info, id); m >= 0) {
        space.welford[id] = m;
        space.depth[id] = r = space.depth.at(m);
      }
    }
    reach[id] = r;
  }
  if (space.reduces.empty()) throw InternalError("reduction region without a reduce node");
  for (const auto& [id, d] : space.depth) space.passes = std::max(space.passes, d);

  for (size_t a = 0; a < space.shape.size(); ++a) {
    (is_reduced_axis(space, a) ? space.length : space.rows) *= space.shape[a];
  }
  const int64_t total = space.rows * space.length;

  classify_layout(space);

  for (size_t k = 0; k < region.outputs.size(); ++k) {
    const ir::NodeId id = region.outputs[k];
    const int64_t count = ir::numel(info.node(id).shape);
    ReduceOutput out{k, id, false, 0};
    if (count == total) {
      out.full = true;
      out.pass = reach_of(id) + 1;
    } else if (count != space.rows) {
      throw InternalError(fmt::format(
          "output %{} ({}) of a region reducing {} over axes [{}] has neither one value per "
          "element ({}) nor one per reduced row ({})",
          id, ir::type_str(info.node(id)), ir::shape_str(space.shape), fmt::join(space.axes, ","),
          total, space.rows));
    }
    space.outputs.push_back(out);
  }
  return space;
}

namespace {

// The index of the thread's partial of piece `piece` in fj_partial<r>.
kir::ExprP slot(const SplitPartials& split, kir::ExprP piece) {
  const kir::ExprP first =
      kir::add(kir::mul(split.group, kir::lit(split.pieces)), std::move(piece));
  if (split.width == 1) return first;
  return kir::add(kir::mul(kir::group(first), kir::lit(split.width)),
                  split.value ? split.value : kir::lit(0));
}

Pairing pairing_of(const SplitPartials& split, ir::NodeId r) {
  const auto it = split.paired.find(r);
  return it == split.paired.end() ? Pairing::none : it->second;
}

// The block where one lane's statement goes: `out`, or a j loop over the accumulators' lanes.
kir::Block& per_lane(kir::Block& out, const SplitPartials& split) {
  if (split.lanes == 0) return out;
  return out.loop(split.lane, kir::lit(0), kir::lit(split.lanes), nullptr, 1);
}

kir::ExprP accumulator(const SplitPartials& split, ir::NodeId r) {
  const kir::ExprP& a = split.accumulators.at(r);
  return split.lanes == 0 ? a : kir::subscript(a, kir::var(split.lane));
}

kir::ExprP partials(const SplitPartials& split, ir::NodeId r) {
  return kir::var(split.partials.at(r));
}

std::string partial_type(const RegionInfo& info, const SplitPartials& split, ir::NodeId r) {
  return "__device__ " + accumulator_of(info, r, pairing_of(split, r)).type;
}

}  // namespace

void split_variables(SplitPartials& split, const RegionInfo& info,
                     const std::vector<ir::NodeId>& reduces) {
  split.arrivals = kir::variable("__device__ unsigned int", "fj_arrivals");
  for (ir::NodeId r : reduces) {
    split.partials[r] = kir::variable(partial_type(info, split, r), info.named("fj_partial", r));
  }
  split.last = kir::variable("__shared__ bool", "fj_last");
  if (split.lanes > 0) split.lane = kir::variable("int", "j");
}

void add_split_scratch(kir::Block& head, const std::vector<ir::NodeId>& reduces,
                       const SplitPartials& split, std::string_view pieces,
                       std::string_view group) {
  head.comment("{}, one block each; the partial results meet in", pieces);
  head.comment(
      "module-scope scratch, and the last block of a {} to arrive (counted atomically) "
      "combines",
      group);
  head.comment("them in a fixed order and resets the count for the next launch");
  const int64_t length = split.groups * split.pieces * split.width;
  for (ir::NodeId r : reduces) head.array(split.partials.at(r), {length});
  head.array(split.arrivals, {split.groups});
}

kir::Block& add_split_arrival(kir::Block& out, const std::vector<ir::NodeId>& reduces,
                              const SplitPartials& split) {
  const kir::ExprP fence = kir::fence();
  const kir::ExprP sync = kir::sync_block();
  auto count = [&](kir::Block& b) {
    const kir::ExprP counter =
        kir::prefix("&", kir::subscript(kir::var(split.arrivals), split.group));
    b.assign(kir::var(split.last), kir::infix(kir::atomic_add(counter, kir::lit("1u")), "==",
                                              kir::lit(fmt::format("{}u", split.pieces - 1))));
  };
  const bool alone = !split.holders;
  kir::Block& holders =
      out.branch(alone ? kir::infix(kir::thread_index(), "==", kir::lit(0)) : split.holders);
  for (ir::NodeId r : reduces) {
    per_lane(holders, split)
        .assign(kir::subscript(partials(split, r), slot(split, split.piece)),
                accumulator(split, r));
  }
  holders.eval(fence);
  if (alone) count(holders);
  out.eval(sync);
  if (alone) {
    kir::Block& last = out.branch(
        kir::infix(kir::var(split.last), "&&", kir::infix(kir::thread_index(), "==", kir::lit(0))));
    last.eval(fence);
    return last;
  }
  // Every holder has fenced its own stores; the barrier orders them before the count.
  kir::Block& counter = out.branch(kir::infix(kir::thread_index(), "==", kir::lit(0)));
  counter.eval(fence);
  count(counter);
  out.eval(sync);
  return out;
}

void add_split_fold(kir::Block& out, const RegionInfo& info, const std::vector<ir::NodeId>& reduces,
                    const SplitPartials& split, kir::ExprP first, int64_t step) {
  for (ir::NodeId r : reduces) {
    const bool paired = pairing_of(split, r) != Pairing::none;
    const Accumulator acc = accumulator_of(info, r, pairing_of(split, r));
    per_lane(out, split).assign(accumulator(split, r), kir::lit(acc.identity));
    const auto [fold, q] = out.loop("int", "q", first, kir::lit(split.pieces),
                                    step == 1 ? nullptr : kir::lit(step), step == 1 ? 0 : 4);
    // Volatile loads: the partials come from L2, never from a stale L1 line (a pair's two
    // fields through fj_volatile_load).
    const kir::ExprP where = kir::prefix("&", kir::subscript(partials(split, r), slot(split, q)));
    const kir::ExprP partial =
        paired ? kir::call("fj_volatile_load", {where})
               : kir::prefix("*", kir::call(fmt::format("static_cast<volatile {}*>", acc.type),
                                            {where}));
    const kir::ExprP a = accumulator(split, r);
    per_lane(fold, split).assign(a, kir::call(acc.functor + "()", {a, partial}));
  }
}

void add_split_reset(kir::Block& out, const SplitPartials& split) {
  out.assign(kir::subscript(kir::var(split.arrivals), split.group), kir::lit(0));
}

}  // namespace fusejit::templates
