// fusion/partition: see partition.h.
//
// The cut is made in these steps over the compute nodes (dataflow.h: elementwise ops,
// reductions, and views/constants that must be written), visited in topological order:
//   0. epilogues (epilogue.h): each matmul, with the chain of its readers that its cuBLASLt
//      epilogue computes, is one gemm region, decided up front; nothing else joins it;
//   1. vertical: each node joins the regions of the values it reads, one producer region at a
//      time, when check_region accepts the union and no path leaves the union and comes back
//      (that would make the region depend on itself);
//   2. horizontal: regions that read the same value merge on the same terms, until none does;
//   3. the surviving regions are ordered topologically and filled in: their nodes (with the free
//      views and constants they read), inputs and outputs;
//   4. recomputation (recompute.h): an elementwise value written only for other regions to read
//      is marked free, to be evaluated again where it is read, and steps 0 to 3 run again; kept
//      when the plan is cheaper (fewer kernels or bytes moved, neither more), repeated while one
//      is;
//   5. one-pass statistics (welford.h): each normalization region lists the mean/variance
//      pairs it can accumulate in one reduction (Region::welford);
//   6. attention (PartitionOptions::attention): each attention pattern the fused kernel takes
//      replaces the regions that computed it (GEMM, normalization, GEMM, and any that only
//      materialized views of its operands) with one attention region. The buffers it reads
//      are made outputs of the graph for steps 0 to 4, so that some region writes each of
//      them; regions that then write nothing anyone reads go, and the others keep only the
//      nodes their remaining outputs need.
// Every producer/consumer pair considered gets a Decision with its reason, and every region
// that evaluates a recomputed value one saying so.
#include "fusion/partition.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <queue>
#include <set>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusejit/error.h"
#include "fusion/attention.h"
#include "fusion/dataflow.h"
#include "fusion/epilogue.h"
#include "fusion/order_writes.h"
#include "fusion/recompute.h"
#include "fusion/region_check.h"
#include "fusion/welford.h"
#include "ir/shape.h"

namespace fusejit::fusion {

namespace {

using detail::Dataflow;
using detail::EpilogueMatch;
using detail::NodeRole;
using detail::RegionVerdict;
using ir::Node;
using ir::shape_str;

struct Group {
  // Unordered while groups grow (the smaller group is appended to the larger); sorted before
  // regions are filled in.
  std::vector<NodeId> members;
  std::vector<NodeId> outputs;   // the members written to memory (region_outputs), ascending
  NodeId first = -1, last = -1;  // smallest and largest member
  bool alive = true;
  bool gemm = false;      // a matmul and what its epilogue folds: never merges
  bool reduces = false;   // has a reduce member
  // Has a member that works at positions loaded at run time, a gather or an update_slice
  // (region_check's rules for them apply).
  bool gathers = false;
  // What the members read from memory (region_inputs of the members), ascending; and their
  // weight (partition.h): the kernel-size limits are checked on these.
  std::vector<NodeId> reads;
  int64_t weight = 0;
  int generation = 0;     // bumped when the group grows
  RegionVerdict verdict;  // the latest accepted one (not for gemm)
};

struct Note {
  bool fused = false;
  std::string reason;
};

struct State {
  const Dataflow& df;
  const std::vector<EpilogueMatch>& epilogues;  // per matmul
  std::vector<NodeId> folded_into;              // per node: its matmul, or -1
  std::vector<Group> groups;
  std::vector<int> group_of;                           // per node; -1 for nodes in no group
  std::map<std::pair<NodeId, NodeId>, Note> vertical;  // (producer, consumer)
  std::map<std::pair<NodeId, NodeId>, Note> siblings;  // (member of one, member of other)
  // Per node that evaluates a value more than once per element (through a concat): the value
  // and the count. Vertical fusion weighs them; horizontal fusion must not bring them together.
  std::map<NodeId, std::vector<std::pair<NodeId, int64_t>>> repeated;
  // update_slice destination -> the update writing it in place: a region that reads the
  // destination runs before the update's (fusion/order_writes.h put them in that order).
  std::map<NodeId, NodeId> writer;

  Group& group(int gi) { return groups[static_cast<size_t>(gi)]; }
  const Group& group(int gi) const { return groups[static_cast<size_t>(gi)]; }
  int group_of_node(NodeId id) const { return group_of[static_cast<size_t>(id)]; }
};

// What a compute node costs its kernel (partition.h), counting the free nodes (views,
// constants) the kernel evaluates inline for it, and how many times per element it evaluates
// each value the node reads. A concat evaluates each operand at an index of its own: it weighs
// one per operand, concat(x, x) reads x twice, and a concat of concats multiplies. The counts
// are the paths from the node through free nodes; they saturate far above any limit.
struct Inlined {
  int64_t weight = 0;
  std::map<NodeId, int64_t> evaluations;  // per value read (df.reads)
};

// A lone node weighing more than this (a concat of thousands of operands, with the passes that
// split it off) would be a kernel NVRTC takes minutes to compile: partition refuses it.
constexpr int64_t kHardNodeWeight = 16 * kMaxRegionWeight;

Inlined inlined(const Dataflow& df, NodeId id) {
  static constexpr int64_t kEnough = int64_t{1} << 40;
  auto add = [](int64_t& to, int64_t v) { to = std::min(kEnough, to + v); };
  Inlined out;
  std::map<NodeId, int64_t, std::greater<>> paths{{id, 1}};  // descending: readers first
  while (!paths.empty()) {
    const auto [n, count] = *paths.begin();
    paths.erase(paths.begin());
    const ir::Node& node = df.node(n);
    if (node.op == ir::Op::concat) {
      const auto operands = static_cast<int64_t>(node.inputs.size());
      add(out.weight, count > kEnough / operands ? kEnough : count * operands);
    } else if (n == id) {
      add(out.weight, ir::op_has(node.op, ir::kCostly) ? kCostlyOpWeight : 1);
    }
    for (NodeId in : node.inputs) add(df.is_free(in) ? paths[in] : out.evaluations[in], count);
  }
  return out;
}

int new_group(State& s, NodeId id, bool gemm, int64_t weight) {
  Group g;
  g.members = {id};
  g.outputs = detail::region_outputs(s.df, g.members);
  g.first = g.last = id;
  g.gemm = gemm;
  g.reduces = ir::op_kind(s.df.node(id).op) == ir::OpKind::reduce;
  g.gathers = ir::op_kind(s.df.node(id).op) == ir::OpKind::gather ||
              s.df.node(id).op == ir::Op::update_slice;
  g.reads = s.df.reads[static_cast<size_t>(id)];
  g.weight = weight;
  s.groups.push_back(std::move(g));
  const int gi = static_cast<int>(s.groups.size()) - 1;
  s.group_of[static_cast<size_t>(id)] = gi;
  return gi;
}

// What the union of groups a and b writes: their outputs, less those only the other one reads.
// (A group's outputs change only when it merges, so each group keeps its own.)
std::vector<NodeId> united_outputs(const State& s, int a, int b) {
  std::vector<NodeId> candidates;
  const Group& ga = s.group(a);
  const Group& gb = s.group(b);
  std::merge(ga.outputs.begin(), ga.outputs.end(), gb.outputs.begin(), gb.outputs.end(),
             std::back_inserter(candidates));
  std::vector<NodeId> out;
  for (NodeId o : candidates) {
    bool written = s.df.graph_output[static_cast<size_t>(o)];
    for (NodeId r : s.df.readers[static_cast<size_t>(o)]) {
      const int g = s.group_of_node(r);
      written = written || (g != a && g != b);
    }
    if (written) out.push_back(o);
  }
  return out;
}

// What the union of groups a and b reads from memory: what each reads, less what the other
// computes (a member read by the other group is one of that group's outputs).
std::vector<NodeId> united_reads(const State& s, int a, int b) {
  auto outside = [&](int from, int other) {
    std::vector<NodeId> kept;
    const Group& f = s.group(from);
    const Group& o = s.group(other);
    std::set_difference(f.reads.begin(), f.reads.end(), o.outputs.begin(), o.outputs.end(),
                        std::back_inserter(kept));
    return kept;
  };
  const std::vector<NodeId> ra = outside(a, b), rb = outside(b, a);
  std::vector<NodeId> out;
  std::set_union(ra.begin(), ra.end(), rb.begin(), rb.end(), std::back_inserter(out));
  return out;
}

// Why the union of groups a and b would be too large a kernel (partition.h), or nothing.
std::optional<std::string> too_large(const State& s, int a, int b, int64_t weight,
                                     const std::vector<NodeId>& outputs) {
  if (weight > kMaxRegionWeight) {
    return fmt::format("region size limit: the kernel would weigh {} (one per op and per concat "
                       "operand evaluated, {} per costly op), more than the {} that keep "
                       "NVRTC's compile time to about a second",
                       weight, kCostlyOpWeight, kMaxRegionWeight);
  }
  const auto buffers = static_cast<int64_t>(united_reads(s, a, b).size() + outputs.size());
  const int64_t bytes = 8 * (buffers + 1);  // and the outer extent of a dynamic kernel
  if (bytes > kMaxKernelParamBytes) {
    return fmt::format("kernel parameter limit: the kernel would take {} buffers ({} bytes of "
                       "parameters with the outer extent), more than the {} bytes a kernel is "
                       "given",
                       buffers, bytes, kMaxKernelParamBytes);
  }
  return std::nullopt;
}

// The verdict on merging groups a and b. Without reductions or gathers only the outputs matter,
// which keeps long elementwise chains linear.
// `weight` is the union's (fuse_vertically counts a producer once per evaluation); `sweeps`:
// a pointwise union may write outputs of several shapes (detail::check_region).
RegionVerdict check_union(const State& s, int a, int b, int64_t weight, bool sweeps = false) {
  const std::vector<NodeId> outputs = united_outputs(s, a, b);
  const Group& ga = s.group(a);
  const Group& gb = s.group(b);
  if (std::optional<std::string> why = too_large(s, a, b, weight, outputs)) {
    RegionVerdict refused;
    refused.reason = std::move(*why);
    return refused;
  }
  if (!ga.reduces && !gb.reduces && !ga.gathers && !gb.gathers) {
    return detail::check_pointwise(s.df, outputs, sweeps);
  }
  std::vector<NodeId> members = s.group(a).members;
  members.insert(members.end(), s.group(b).members.begin(), s.group(b).members.end());
  std::sort(members.begin(), members.end());
  return detail::check_region(s.df, members, outputs, sweeps);
}

// Merges the smaller of groups a and b into the larger; returns the one kept.
int merge_groups(State& s, int a, int b, int64_t weight, RegionVerdict verdict) {
  if (s.group(a).members.size() < s.group(b).members.size()) std::swap(a, b);
  std::vector<NodeId> outputs = united_outputs(s, a, b);
  std::vector<NodeId> reads = united_reads(s, a, b);
  Group& k = s.group(a);
  Group& g = s.group(b);
  k.members.insert(k.members.end(), g.members.begin(), g.members.end());
  for (NodeId m : g.members) s.group_of[static_cast<size_t>(m)] = a;
  k.outputs = std::move(outputs);
  k.reads = std::move(reads);
  k.weight = weight;
  k.first = std::min(k.first, g.first);
  k.last = std::max(k.last, g.last);
  k.reduces = k.reduces || g.reduces;
  k.gathers = k.gathers || g.gathers;
  ++k.generation;
  k.verdict = std::move(verdict);
  g = Group{};
  g.alive = false;
  return a;
}

// The groups that must run after group gi: those that read what it writes (only outputs are
// read by other groups), and those that write in place a buffer it reads (State::writer).
std::set<int> successors(const State& s, int gi) {
  std::set<int> succ;
  for (NodeId o : s.group(gi).outputs) {
    for (NodeId r : s.df.readers[static_cast<size_t>(o)]) {
      const int g = s.group_of[static_cast<size_t>(r)];
      if (g >= 0 && g != gi) succ.insert(g);
    }
  }
  if (s.writer.empty()) return succ;
  for (NodeId in : s.group(gi).reads) {
    const auto it = s.writer.find(in);
    if (it == s.writer.end()) continue;
    const int g = s.group_of[static_cast<size_t>(it->second)];
    if (g >= 0 && g != gi) succ.insert(g);
  }
  return succ;
}

// A region on a path from x to y or from y to x other than x and y themselves: merging x and y
// would then make the merged region both before and after it. Returns its first member.
std::optional<NodeId> cycle_through(const State& s, int x, int y) {
  for (auto [from, to] : {std::pair{x, y}, std::pair{y, x}}) {
    // Operands precede their readers, so a group on a path into `to` starts before `to` ends.
    const NodeId last = s.group(to).last;
    // The search stays near x and y (it stops past `to`): a set, not a flag per group, keeps
    // its cost to what it visits, and the partition linear in the graph's size.
    std::set<int> seen;
    std::vector<std::pair<int, int>> stack;  // (group, first hop)
    for (int n : successors(s, from)) {
      if (n != to) stack.push_back({n, n});
    }
    while (!stack.empty()) {
      auto [gi, hop] = stack.back();
      stack.pop_back();
      if (gi == to) return s.group(hop).first;
      if (!seen.insert(gi).second) continue;
      if (s.group(gi).first > last) continue;
      for (int n : successors(s, gi)) stack.push_back({n, hop});
    }
  }
  return std::nullopt;
}

std::string fused_reason(const Dataflow& df, const RegionVerdict& v, NodeId producer,
                         NodeId consumer) {
  const Node& p = df.node(producer);
  const Node& c = df.node(consumer);
  const std::string axes =
      fmt::format("axes [{}] of {}", fmt::join(v.reduce_axes, ","), shape_str(v.shape));
  switch (v.kind) {
    case RegionKind::pointwise:
      if (c.op == ir::Op::update_slice) {
        return fmt::format(
            "computed where update_slice %{} writes it: one kernel over {}, the "
            "store into %{} in place",
            consumer, shape_str(v.shape), c.inputs[0]);
      }
      if (p.shape != c.shape) {
        return fmt::format("elementwise chain over {} ({} {} {})", shape_str(v.shape),
                           shape_str(p.shape),
                           ir::broadcasts_to(p.shape, c.shape) ? "broadcast to" : "read as",
                           shape_str(c.shape));
      }
      return fmt::format("elementwise chain over {}", shape_str(v.shape));
    case RegionKind::reduction:
      if (std::find(v.online_sums.begin(), v.online_sums.end(), consumer) != v.online_sums.end()) {
        return "online softmax pair over " + axes +
               ": the sum of exp(x - max) accumulated with its max in one pass";
      }
      if (ir::op_kind(c.op) == ir::OpKind::reduce) return "prologue of the reduction over " + axes;
      if (ir::numel(c.shape) < ir::numel(v.shape)) return "epilogue of the reduction over " + axes;
      return "prologue of the reduction over " + axes;
    case RegionKind::normalization:
      return "normalization over " + axes + ": each row is read once";
    case RegionKind::gemm:
    case RegionKind::attention:  // neither comes from check_region
      break;
  }
  return "fused";
}

// A matmul's region: the matmul and the nodes its epilogue folds, written as one value.
void new_gemm_group(State& s, NodeId m) {
  const int gi = new_group(s, m, true, 1);
  Group& g = s.group(gi);
  const EpilogueMatch& match = s.epilogues[static_cast<size_t>(m)];
  for (NodeId f : match.folded) {
    g.members.push_back(f);
    s.group_of[static_cast<size_t>(f)] = gi;
  }
  std::sort(g.members.begin(), g.members.end());
  g.first = g.members.front();
  g.last = g.members.back();
  g.outputs = detail::region_outputs(s.df, g.members);
  if (g.outputs != std::vector<NodeId>{match.output}) {
    throw InternalError(fmt::format(
        "partition: the epilogue of matmul %{} ends at %{}, but its region [{}] writes [{}]", m,
        match.output, fmt::join(g.members, ","), fmt::join(g.outputs, ",")));
  }
}

// Step 1: each compute node joins the regions of what it reads, where it may.
void fuse_vertically(State& s, const PartitionOptions& options) {
  const Dataflow& df = s.df;
  for (size_t i = 0; i < df.role.size(); ++i) {
    const NodeId id = static_cast<NodeId>(i);
    const NodeRole role = df.role[i];
    if (role != NodeRole::compute && role != NodeRole::gemm) continue;
    if (s.folded_into[i] >= 0) continue;  // in its matmul's region already
    const std::vector<NodeId>& reads = df.reads[i];
    if (role == NodeRole::gemm) {
      new_gemm_group(s, id);
      for (NodeId r : reads) {
        if (df.role_of(r) == NodeRole::input) continue;
        s.vertical[{r, id}] = {false, fmt::format("matmul %{} is a library call: it reads %{} "
                                                  "from memory",
                                                  id, r)};
      }
      continue;
    }
    const Inlined cost = inlined(df, id);
    if (cost.weight > kHardNodeWeight) {
      throw UsageError(fmt::format(
          "{} %{} alone weighs {} (a concat weighs one per operand it evaluates), more than the "
          "{} a kernel may: NVRTC would take minutes to compile it; concatenate in stages of at "
          "most {} tensors (the passes do so unless FUSEJIT_DISABLE=passes)",
          ir::op_name(df.node(id).op), id, cost.weight, kHardNodeWeight, kMaxConcatOperands));
    }
    new_group(s, id, false, cost.weight);
    for (const auto& [r, count] : cost.evaluations) {
      if (count > 1) s.repeated[id].push_back({r, count});
    }
    for (auto it = reads.rbegin(); it != reads.rend(); ++it) {
      const NodeId r = *it;
      const NodeRole rr = df.role_of(r);
      if (rr == NodeRole::input) continue;
      const int p = s.group_of_node(r);
      if (p < 0) throw InternalError(fmt::format("partition: %{} is read before its region", r));
      if (s.group(p).gemm) {
        // The epilogue match explained why the chain stopped before this reader.
        s.vertical.try_emplace(
            {r, id},
            Note{false,
                 fmt::format("matmul %{} is a library call: what follows starts a new "
                             "region",
                             rr == NodeRole::gemm ? r : s.folded_into[static_cast<size_t>(r)])});
        continue;
      }
      if (!options.fusion) {
        s.vertical[{r, id}] = {false, "fusion disabled"};
        continue;
      }
      const int cur = s.group_of_node(id);
      if (p == cur) {
        s.vertical[{r, id}] = {true, fused_reason(df, s.group(cur).verdict, r, id)};
        continue;
      }
      if (const std::optional<NodeId> via = cycle_through(s, p, cur)) {
        s.vertical[{r, id}] = {false, fmt::format("fusing would create a cycle through the "
                                                  "region of %{}",
                                                  *via)};
        continue;
      }
      const int64_t weight =
          s.group(cur).weight +
          std::min(kMaxRegionWeight + 1, s.group(p).weight) * cost.evaluations.at(r);
      RegionVerdict v = check_union(s, p, cur, weight);
      if (!v.ok) {
        s.vertical[{r, id}] = {false, v.reason};
        continue;
      }
      s.vertical[{r, id}] = {true, fused_reason(df, v, r, id)};
      merge_groups(s, cur, p, weight, std::move(v));
    }
  }
}

// Why siblings a and b must stay apart: a member of one evaluates a value of the other more than
// once per element (a concat of it), so one kernel would compute that value's region as many
// times; vertical fusion weighed this, so merging as siblings would bypass it.
std::optional<std::string> repeats_other(const State& s, int a, int b) {
  for (const auto& [x, y] : {std::pair{a, b}, std::pair{b, a}}) {
    for (NodeId m : s.group(x).members) {
      const auto it = s.repeated.find(m);
      if (it == s.repeated.end()) continue;
      for (const auto& [r, count] : it->second) {
        if (s.group_of_node(r) != y) continue;
        return fmt::format("%{} evaluates %{} {} times per element (a concat): in one kernel, "
                           "the region of %{} would be computed {} times",
                           m, r, count, r, count);
      }
    }
  }
  return std::nullopt;
}

// Whether group a reads what group b writes, or b what a writes.
bool reads_other(const State& s, int a, int b) {
  for (const auto& [x, y] : {std::pair{a, b}, std::pair{b, a}}) {
    for (NodeId in : s.group(x).reads) {
      if (s.group_of_node(in) == y) return true;
    }
  }
  return false;
}

// Why siblings a and b, reading u, merged into a region of verdict v.
std::string sibling_reason(const State& s, int a, int b, size_t u, const RegionVerdict& v) {
  std::set<Shape> shapes;
  for (NodeId o : united_outputs(s, a, b)) shapes.insert(ir::computed_shape(*s.df.graph, o));
  if (shapes.size() == 1) {
    return fmt::format("siblings read %{} over {}: one kernel with several outputs", u,
                       shape_str(v.shape));
  }
  std::vector<std::string> names;
  for (const Shape& shape : shapes) names.push_back(shape_str(shape));
  return fmt::format("siblings read %{}: one kernel with a sweep over each of {}", u,
                     fmt::join(names, ", "));
}

// Step 2: regions that read the same value merge, until none can. A refusal stands as long as
// neither region grows (merging others only adds paths, never removes one). Independent
// pointwise siblings of different shapes (neither reads the other) merge as one kernel with a
// sweep per shape where PartitionOptions::sweeps allows: a launch fewer, each element still
// computed once. A reader of the other keeps vertical fusion's verdict (its values would be
// computed again at every position it broadcasts to).
void fuse_horizontally(State& s, const PartitionOptions& options) {
  const Dataflow& df = s.df;
  std::set<std::tuple<int, int, int, int>> refused;  // (group, generation, group, generation)
  // The values with the most elements first: where merges exclude each other (a cycle), the
  // siblings that share the larger read go together.
  std::vector<size_t> order(df.role.size());
  for (size_t u = 0; u < order.size(); ++u) order[u] = u;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return ir::numel(df.node(static_cast<NodeId>(x)).shape) >
           ir::numel(df.node(static_cast<NodeId>(y)).shape);
  });
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t u : order) {
      // One reading member per region, in order of the readers.
      std::vector<NodeId> readers;
      std::set<int> seen;
      for (NodeId r : df.readers[u]) {
        if (df.role_of(r) != NodeRole::compute) continue;
        const int g = s.group_of_node(r);
        if (s.group(g).gemm) continue;  // folded into an epilogue
        if (g == s.group_of[u] || !seen.insert(g).second) continue;
        readers.push_back(r);
      }
      for (size_t a = 0; a < readers.size(); ++a) {
        for (size_t b = a + 1; b < readers.size(); ++b) {
          const NodeId ra = readers[a], rb = readers[b];
          const int ga = s.group_of_node(ra);
          const int gb = s.group_of_node(rb);
          if (ga == gb) continue;
          const auto key = std::tuple{std::min(ga, gb), s.group(std::min(ga, gb)).generation,
                                      std::max(ga, gb), s.group(std::max(ga, gb)).generation};
          if (refused.count(key) != 0) continue;
          if (const std::optional<NodeId> via = cycle_through(s, ga, gb)) {
            refused.insert(key);
            s.siblings[{ra, rb}] = {false, fmt::format("siblings reading %{}: fusing would create "
                                                       "a cycle through the region of %{}",
                                                       u, *via)};
            continue;
          }
          if (const std::optional<std::string> why = repeats_other(s, ga, gb)) {
            refused.insert(key);
            s.siblings[{ra, rb}] = {false, fmt::format("siblings reading %{}: {}", u, *why)};
            continue;
          }
          const int64_t weight = s.group(ga).weight + s.group(gb).weight;
          const bool sweeps = options.sweeps && !reads_other(s, ga, gb);
          RegionVerdict v = check_union(s, ga, gb, weight, sweeps);
          if (!v.ok) {
            refused.insert(key);
            s.siblings[{ra, rb}] = {false, fmt::format("siblings reading %{}: {}", u, v.reason)};
            continue;
          }
          s.siblings[{ra, rb}] = {true, sibling_reason(s, ga, gb, u, v)};
          merge_groups(s, std::min(ga, gb), std::max(ga, gb), weight, std::move(v));
          changed = true;
        }
      }
    }
  }
}

// Alive groups in a valid execution order; among ready ones, the earliest first member first.
std::vector<int> execution_order(const State& s) {
  std::vector<std::set<int>> succ(s.groups.size());
  std::vector<int> indegree(s.groups.size(), 0);
  for (size_t gi = 0; gi < s.groups.size(); ++gi) {
    if (!s.groups[gi].alive) continue;
    succ[gi] = successors(s, static_cast<int>(gi));
    for (int n : succ[gi]) ++indegree[static_cast<size_t>(n)];
  }
  using Ready = std::pair<NodeId, int>;  // (first member, group)
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready;
  size_t alive = 0;
  for (size_t gi = 0; gi < s.groups.size(); ++gi) {
    if (!s.groups[gi].alive) continue;
    ++alive;
    if (indegree[gi] == 0) ready.push({s.groups[gi].first, static_cast<int>(gi)});
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int gi = ready.top().second;
    ready.pop();
    order.push_back(gi);
    for (int n : succ[static_cast<size_t>(gi)]) {
      if (--indegree[static_cast<size_t>(n)] == 0) {
        ready.push({s.group(n).first, n});
      }
    }
  }
  if (order.size() != alive) {
    throw InternalError(
        fmt::format("partition: the regions form a cycle ({} of {} ordered)", order.size(), alive));
  }
  return order;
}

// members: the matmul and the nodes its epilogue folds, sorted.
Region gemm_region(const State& s, const std::vector<NodeId>& members) {
  const Dataflow& df = s.df;
  NodeId m = -1;
  for (NodeId id : members) {
    if (df.role_of(id) == NodeRole::gemm) m = id;
  }
  const EpilogueMatch& match = s.epilogues[static_cast<size_t>(m)];
  const detail::GemmOperands& ops = df.gemm[static_cast<size_t>(m)];
  Region r;
  r.kind = RegionKind::gemm;
  r.shape = df.node(m).shape;
  // The folded transposes, the matmul, the folded nodes, and the constants and views they read.
  r.nodes = detail::region_nodes(df, members);
  r.inputs = {ops.a, ops.b};
  if (match.epilogue.scale >= 0) r.inputs.push_back(match.epilogue.scale);
  if (match.epilogue.bias >= 0) r.inputs.push_back(match.epilogue.bias);
  if (match.epilogue.residual >= 0) r.inputs.push_back(match.epilogue.residual);
  r.outputs = {match.output};
  r.epilogue = match.epilogue;
  return r;
}

Region kernel_region(const Dataflow& df, const std::vector<NodeId>& members) {
  const std::vector<NodeId> outputs = detail::region_outputs(df, members);
  // The partition accepted the region, sweeps included: this only computes its verdict again.
  const RegionVerdict v = detail::check_region(df, members, outputs, true);
  if (!v.ok) {
    throw InternalError(
        fmt::format("partition: the region of nodes [{}] was accepted and is now "
                    "refused: {}",
                    fmt::join(members, ","), v.reason));
  }
  Region r;
  r.kind = v.kind;
  r.shape = v.shape;
  r.reduce_axes = v.reduce_axes;
  r.nodes = detail::region_nodes(df, members);
  r.inputs = detail::region_inputs(df, members);
  r.outputs = outputs;
  r.welford = welford_pairs(*df.graph, r);
  // Only a lone node can pass kMaxKernelParamBytes; no kernel can take more than this.
  const auto bytes = static_cast<int64_t>(8 * (r.inputs.size() + r.outputs.size() + 1));
  if (bytes > kHardKernelParamBytes) {
    throw UsageError(fmt::format(
        "{} %{} reads {} buffers: its kernel would take {} bytes of parameters, more than the "
        "{} CUDA allows; combine the operands in steps (for instance concat or sum them in "
        "groups of a few hundred)",
        ir::op_name(df.node(members.back()).op), members.back(), r.inputs.size(), bytes,
        kHardKernelParamBytes));
  }
  return r;
}

// Why a view between a buffer and a matmul costs nothing (detail::GemmOperands).
std::string folded_view(const ir::Node& view, const ir::Node& operand,
                        std::string_view transpose_flag) {
  switch (view.op) {
    case ir::Op::permute:
      return fmt::format(
          "transpose of the last two axes folded into the GEMM as {} (a layout flag, no copy)",
          transpose_flag);
    case ir::Op::expand:
      return "broadcast of batch dims folded into the GEMM as a batch stride of 0 (no copy)";
    default:
      if (!detail::is_batch_view(view, operand))
        return "reshape of a buffer read in place by the GEMM in the reshape's shape (a dense "
               "buffer's bytes are the same; no copy)";
      return "reshape adding or dropping 1s among the batch dims folded into the GEMM's batch "
             "strides (no copy)";
  }
}

std::vector<Decision> decisions(const State& s) {
  const Dataflow& df = s.df;
  std::vector<Decision> out;
  auto same_region = [&](NodeId a, NodeId b) {
    return s.group_of[static_cast<size_t>(a)] == s.group_of[static_cast<size_t>(b)];
  };
  for (size_t i = 0; i < df.role.size(); ++i) {
    const NodeId id = static_cast<NodeId>(i);
    if (!df.materialized[i].empty()) out.push_back({id, -1, false, df.materialized[i]});
    if (df.role[i] == NodeRole::input && df.graph_output[i]) {
      out.push_back(
          {id, -1, false,
           fmt::format("output %{} is a graph input: no kernel, the executor copies it", id)});
    }
    if (df.role[i] == NodeRole::gemm) {
      const detail::GemmOperands& ops = df.gemm[i];
      for (const auto& [views, flag] : {std::pair{&ops.views_a, "transpose_a"},
                                         std::pair{&ops.views_b, "transpose_b"}}) {
        for (NodeId v : *views) {
          const ir::Node& view = df.node(v);
          out.push_back({v, id, true, folded_view(view, df.node(view.inputs[0]), flag)});
        }
      }
    }
    for (NodeId r : df.reads[i]) {
      auto it = s.vertical.find({r, id});
      if (it == s.vertical.end()) continue;
      const bool fused = same_region(r, id);
      std::string reason = it->second.reason;
      if (fused && !it->second.fused) reason = "fused when sibling regions merged (" + reason + ")";
      out.push_back({r, id, fused, std::move(reason)});
    }
  }
  for (const auto& [pair, note] : s.siblings) {
    // A pair that is also producer and consumer was explained above.
    if (s.vertical.count(pair) != 0 || s.vertical.count({pair.second, pair.first}) != 0) continue;
    const bool fused = same_region(pair.first, pair.second);
    std::string reason = note.reason;
    if (fused && !note.fused) reason = "fused when other regions merged (" + reason + ")";
    out.push_back({pair.first, pair.second, fused, std::move(reason)});
  }
  return out;
}

// One partition of the graph, with the values marked in `recomputed` evaluated where they are
// read (fusion/recompute.h): steps 0 to 3 above.
struct Cut {
  std::vector<bool> recomputed;  // per node
  Dataflow df;
  std::vector<Region> regions;
  std::vector<Decision> decisions;
  detail::PlanCost cost;
};

Cut cut(const ir::Graph& g, const PartitionOptions& options, std::vector<bool> recomputed) {
  Cut c;
  c.recomputed = std::move(recomputed);
  c.df = detail::analyze(g, c.recomputed);
  const std::vector<EpilogueMatch> epilogues = detail::match_epilogues(c.df, options);
  State s{c.df,
          epilogues,
          std::vector<NodeId>(g.size(), -1),
          {},
          std::vector<int>(g.size(), -1),
          {},
          {}};
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(static_cast<NodeId>(i));
    if (n.op == ir::Op::update_slice) s.writer[n.inputs[0]] = static_cast<NodeId>(i);
  }
  for (size_t m = 0; m < epilogues.size(); ++m) {
    const EpilogueMatch& match = epilogues[m];
    for (NodeId f : match.folded) s.folded_into[static_cast<size_t>(f)] = static_cast<NodeId>(m);
    // Matched in ascending order: where two chains name a pair, the first explains it.
    for (const Decision& d : match.decisions) {
      s.vertical.try_emplace({d.producer, d.consumer}, Note{d.fused, d.reason});
    }
  }

  fuse_vertically(s, options);
  if (options.fusion) fuse_horizontally(s, options);

  for (int gi : execution_order(s)) {
    std::vector<NodeId> members = s.group(gi).members;
    std::sort(members.begin(), members.end());
    c.regions.push_back(s.group(gi).gemm ? gemm_region(s, members) : kernel_region(c.df, members));
  }
  c.decisions = decisions(s);
  c.cost = detail::plan_cost(g, c.regions);
  return c;
}

// Step 4 (fusion/recompute.h): while recomputing a candidate makes the plan cheaper, recompute
// it and partition again. `steps` receives, per value recomputed, what its step did. Each trial
// partitions the whole graph, so the trials are bounded twice: at most kMaxRecomputeTrials, and
// at most kRecomputeNodeBudget nodes partitioned over all of them, which keeps planning linear
// in the graph's size (a graph of 512 nodes gets 256 trials, one of 25,000 nodes 5).
constexpr int kMaxRecomputeTrials = 256;
constexpr size_t kRecomputeNodeBudget = size_t{1} << 17;
// Trials are independent partitions of one graph: up to this many run at once, on the threads
// of one TrialPool per search. The candidates are still taken in order (the first cheaper one
// of a batch wins, and the trials after it count for nothing), so the plan is the one a serial
// search makes.
constexpr unsigned kMaxRecomputeThreads = 8;

// The threads of one recompute() search: up to `width` trials run at once, the calling thread
// being one of them. The helper threads are made when a batch first wants them and serve every
// batch after it; they are joined when the pool goes.
class TrialPool {
 public:
  TrialPool(const ir::Graph& g, const PartitionOptions& options, size_t width)
      : g_(g), options_(options), width_(width) {}
  TrialPool(const TrialPool&) = delete;
  TrialPool& operator=(const TrialPool&) = delete;
  ~TrialPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : helpers_) t.join();
  }

  // cut() of each trial, run together; a trial that threw holds its exception.
  std::vector<std::optional<Cut>> cut_all(std::vector<std::vector<bool>> trials,
                                          std::vector<std::exception_ptr>& errors) {
    std::unique_lock<std::mutex> lock(mu_);
    trials_ = std::move(trials);
    out_.assign(trials_.size(), std::nullopt);
    errors_.assign(trials_.size(), nullptr);
    next_ = 0;
    finished_ = 0;
    const size_t wanted = std::min(width_, trials_.size());  // this thread included
    try {
      while (helpers_.size() + 1 < wanted) helpers_.emplace_back(&TrialPool::help, this);
    } catch (const std::system_error&) {
      // Fewer helpers: this thread runs the trials that no thread could be made for.
    }
    lock.unlock();
    wake_.notify_all();
    lock.lock();
    run_claimed(lock);
    done_.wait(lock, [&] { return finished_ == trials_.size(); });
    errors = std::move(errors_);
    return std::move(out_);
  }

 private:
  // Runs trials not yet claimed until none is left; `lock` holds mu_ between trials.
  void run_claimed(std::unique_lock<std::mutex>& lock) {
    while (next_ < trials_.size()) {
      const size_t i = next_++;
      lock.unlock();
      try {
        out_[i] = cut(g_, options_, std::move(trials_[i]));
      } catch (...) {
        errors_[i] = std::current_exception();
      }
      lock.lock();
      if (++finished_ == trials_.size()) done_.notify_all();
    }
  }

  void help() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      wake_.wait(lock, [&] { return stopping_ || next_ < trials_.size(); });
      if (stopping_) return;
      run_claimed(lock);
    }
  }

  const ir::Graph& g_;
  const PartitionOptions& options_;
  const size_t width_;
  std::vector<std::thread> helpers_;
  std::mutex mu_;
  std::condition_variable wake_;  // a batch or the end: for the helpers
  std::condition_variable done_;  // the batch's last trial finished: for cut_all
  bool stopping_ = false;
  // The batch: its trials, their results, the next trial to claim and how many have finished.
  std::vector<std::vector<bool>> trials_;
  std::vector<std::optional<Cut>> out_;
  std::vector<std::exception_ptr> errors_;
  size_t next_ = 0;
  size_t finished_ = 0;
};

// The candidates from `next` on that stay within budget, up to `limit` of them: their marks in
// `marks` and their indices in `taken`. `next` moves past every candidate looked at.
void take_trials(const ir::Graph& g, const std::vector<bool>& recomputed,
                 const std::vector<std::vector<NodeId>>& candidates, size_t limit, size_t& next,
                 std::vector<size_t>& taken, std::vector<std::vector<bool>>& marks) {
  for (; next < candidates.size() && marks.size() < limit; ++next) {
    std::vector<bool> trial = recomputed;
    for (NodeId v : candidates[next]) trial[static_cast<size_t>(v)] = true;
    if (detail::within_budget(g, trial)) {
      taken.push_back(next);
      marks.push_back(std::move(trial));
    }
  }
}

// When the bound stops the search, `said` receives a decision that says so.
Cut recompute(const ir::Graph& g, const PartitionOptions& options, Cut best,
              std::map<NodeId, std::string>& steps, std::vector<Decision>& said) {
  const int max_trials = static_cast<int>(
      std::min<size_t>(kMaxRecomputeTrials, kRecomputeNodeBudget / std::max<size_t>(g.size(), 1)));
  const size_t batch =
      options.recompute_threads > 0
          ? static_cast<size_t>(options.recompute_threads)
          : std::clamp(std::thread::hardware_concurrency(), 1u, kMaxRecomputeThreads);
  TrialPool pool(g, options, batch);
  int trials = 0;
  bool improved = true;
  while (improved && trials < max_trials) {
    improved = false;
    const std::vector<std::vector<NodeId>> candidates =
        detail::recompute_candidates(best.df, best.regions);
    size_t next = 0;  // the first candidate not yet checked against the budget
    while (!improved) {
      // The next batch of candidates within budget; past the bound, one tells whether any is
      // left untried.
      const size_t room = static_cast<size_t>(max_trials - trials);
      std::vector<size_t> taken;
      std::vector<std::vector<bool>> marks;
      take_trials(g, best.recomputed, candidates, std::min(batch, std::max<size_t>(room, 1)), next,
                  taken, marks);
      if (marks.empty()) break;
      if (room == 0) {
        improved = true;  // a candidate is left untried
        break;
      }
      std::vector<std::exception_ptr> errors;
      std::vector<std::optional<Cut>> cuts = pool.cut_all(std::move(marks), errors);
      for (size_t i = 0; i < cuts.size(); ++i) {
        ++trials;
        if (errors[i]) std::rethrow_exception(errors[i]);
        if (!detail::cheaper(cuts[i]->cost, best.cost)) continue;
        const std::vector<NodeId>& values = candidates[taken[i]];
        const std::string step = fmt::format(
            "recomputing %{} took the plan from {} kernels and {} bytes moved to {} and {}",
            fmt::join(values, ", %"), best.cost.kernels, best.cost.bytes, cuts[i]->cost.kernels,
            cuts[i]->cost.bytes);
        for (NodeId v : values) steps[v] = step;
        best = std::move(*cuts[i]);
        improved = true;
        break;
      }
    }
  }
  if (improved && trials >= max_trials) {
    said.push_back({-1, -1, false,
                    fmt::format("recompute: the search for values worth recomputing stopped "
                                "after {} trials on this graph of {} nodes (each partitions the "
                                "whole graph; at most {} nodes are partitioned in all, which "
                                "keeps planning linear in the graph's size)",
                                max_trials, g.size(), kRecomputeNodeBudget)});
  }
  return best;
}

// An attention pattern the fused kernel takes (step 6).
struct FusedAttention {
  AttentionPattern pattern;
  AttentionRegion region;
  AttentionLayout layout;
};

// The attention region of `f`: the pattern's nodes and the views under its operands.
Region attention_kernel_region(const FusedAttention& f, const ir::Graph& g) {
  Region r;
  r.kind = RegionKind::attention;
  std::set<NodeId> nodes(f.pattern.nodes.begin(), f.pattern.nodes.end());
  nodes.insert(f.layout.views.begin(), f.layout.views.end());
  // The constants the pattern reads (scales, fills), and what the where's condition of a causal
  // mask is computed from (aranges and comparisons: the kernel compares positions itself, but
  // the nodes say what it computes).
  std::vector<NodeId> todo(nodes.begin(), nodes.end());
  std::set<NodeId> buffers = {f.layout.q.buffer, f.layout.k.buffer, f.layout.v.buffer};
  if (f.layout.mask.buffer >= 0) buffers.insert(f.layout.mask.buffer);
  while (!todo.empty()) {
    const NodeId id = todo.back();
    todo.pop_back();
    for (NodeId in : g.node(id).inputs) {
      if (buffers.count(in) != 0 || nodes.count(in) != 0) continue;
      const ir::Op op = g.node(in).op;
      const bool position = f.region.mask == AttentionMask::causal && in != f.region.q &&
                            in != f.region.k && in != f.region.v;
      if (op == ir::Op::constant || position) {
        nodes.insert(in);
        todo.push_back(in);
      }
    }
  }
  nodes.insert(f.layout.out_views.begin(), f.layout.out_views.end());
  r.nodes.assign(nodes.begin(), nodes.end());
  r.inputs = {f.layout.q.buffer, f.layout.k.buffer, f.layout.v.buffer};
  if (f.layout.mask.buffer >= 0) r.inputs.push_back(f.layout.mask.buffer);
  r.outputs = {f.layout.o.buffer};
  r.shape = g.node(f.pattern.output).shape;
  r.attention = f.region;
  return r;
}

// The attention regions of step 6, and the nodes they take from the cut.
struct AttentionRegions {
  std::vector<Region> regions;
  // taken: the attention regions' nodes; computed: the patterns' own (read only inside them).
  std::vector<bool> taken, computed;
};

AttentionRegions attention_regions(const std::vector<FusedAttention>& fused, const ir::Graph& g) {
  AttentionRegions a;
  a.taken.assign(g.size(), false);
  a.computed.assign(g.size(), false);
  for (const FusedAttention& f : fused) {
    a.regions.push_back(attention_kernel_region(f, g));
    for (NodeId id : a.regions.back().nodes) a.taken[static_cast<size_t>(id)] = true;
    for (NodeId id : f.pattern.nodes) a.computed[static_cast<size_t>(id)] = true;
    for (NodeId id : f.layout.out_views) a.computed[static_cast<size_t>(id)] = true;
  }
  return a;
}

// Where each attention region goes: in place of the region that computed its output. `place[i]`
// gets the attention that replaces `regions[i]` (it starts at -1, none). Returns why it could not
// be done, or "".
std::string place_attention(const std::vector<Region>& regions,
                            const std::vector<FusedAttention>& fused, std::vector<int>& place) {
  for (size_t a = 0; a < fused.size(); ++a) {
    for (size_t i = 0; i < regions.size(); ++i) {
      const Region& r = regions[i];
      if (std::find(r.nodes.begin(), r.nodes.end(), fused[a].pattern.output) == r.nodes.end()) {
        continue;
      }
      if (r.outputs != std::vector<NodeId>{fused[a].pattern.output}) {
        return fmt::format("the region of %{} also computes %{} from it (a GEMM epilogue)",
                           fused[a].pattern.output, r.outputs.front());
      }
      place[i] = static_cast<int>(a);
    }
  }
  return "";
}

// The values read from memory: graph outputs, what the attention regions read and what the
// live regions read.
std::set<NodeId> values_read(const std::vector<NodeId>& outputs,
                             const std::vector<Region>& attention,
                             const std::vector<Region>& regions, const std::vector<bool>& alive) {
  std::set<NodeId> needed(outputs.begin(), outputs.end());
  for (const Region& r : attention) needed.insert(r.inputs.begin(), r.inputs.end());
  for (size_t i = 0; i < regions.size(); ++i) {
    if (alive[i]) needed.insert(regions[i].inputs.begin(), regions[i].inputs.end());
  }
  return needed;
}

// `r` (region `i` of the cut) keeps only the outputs `kept`, with the nodes they need and the
// inputs those read. Returns why it could not, or "".
std::string keep_outputs(Region& r, size_t i, std::vector<NodeId> kept, const ir::Graph& g,
                         const Dataflow& df) {
  if (r.kind == RegionKind::gemm) return "a GEMM's output is read by the attention only";
  r.outputs = std::move(kept);
  // The nodes the kept outputs need; the inputs those read.
  std::set<NodeId> inside(r.nodes.begin(), r.nodes.end());
  std::set<NodeId> need(r.outputs.begin(), r.outputs.end());
  for (auto it = r.nodes.rbegin(); it != r.nodes.rend(); ++it) {
    if (need.count(*it) == 0) continue;
    for (NodeId in : g.node(*it).inputs) need.insert(in);
  }
  std::vector<NodeId> nodes, members;
  for (NodeId id : r.nodes) {
    if (need.count(id) == 0) continue;
    nodes.push_back(id);
    if (df.role_of(id) == detail::NodeRole::compute) members.push_back(id);
  }
  std::vector<NodeId> inputs;
  for (NodeId id : r.inputs) {
    if (need.count(id) != 0) inputs.push_back(id);
  }
  const RegionVerdict v = detail::check_region(df, members, r.outputs, true);
  if (!v.ok) {
    return fmt::format("region {} would keep only [%{}], which it cannot compute alone: {}",
                       i, fmt::join(r.outputs, ", %"), v.reason);
  }
  r.nodes = std::move(nodes);
  r.inputs = std::move(inputs);
  r.kind = v.kind;
  r.shape = v.shape;
  r.reduce_axes = v.reduce_axes;
  r.welford = welford_pairs(g, r);
  return "";
}

// Drops the outputs of `regions` that nothing reads from memory any more, and the regions left
// with none (`alive[i]` false), until no region is dropped. Returns why it could not, or "".
std::string drop_unread(std::vector<Region>& regions, std::vector<bool>& alive,
                        const AttentionRegions& a, const std::vector<NodeId>& outputs,
                        const ir::Graph& g, const Dataflow& df) {
  for (bool dropped = true; dropped;) {
    dropped = false;
    const std::set<NodeId> needed = values_read(outputs, a.regions, regions, alive);
    for (size_t i = 0; i < regions.size(); ++i) {
      if (!alive[i]) continue;
      Region& r = regions[i];
      std::vector<NodeId> kept;
      for (NodeId o : r.outputs) {
        if (needed.count(o) != 0 && !a.computed[static_cast<size_t>(o)]) kept.push_back(o);
      }
      if (kept.empty()) {
        alive[i] = false;
        dropped = true;
      } else if (kept != r.outputs) {
        const std::string why = keep_outputs(r, i, std::move(kept), g, df);
        if (!why.empty()) return why;
        dropped = true;  // what it reads may have shrunk
      }
    }
  }
  return "";
}

// Why a live region reads a value that an attention writing through its output's views no
// longer writes (the output, or a view before the last), or "".
std::string reads_unwritten(const std::vector<Region>& regions, const std::vector<bool>& alive,
                            const std::vector<FusedAttention>& fused) {
  for (const FusedAttention& f : fused) {
    if (f.layout.out_views.empty()) continue;
    std::set<NodeId> gone(f.layout.out_views.begin(), f.layout.out_views.end() - 1);
    gone.insert(f.pattern.output);
    for (size_t i = 0; i < regions.size(); ++i) {
      if (!alive[i]) continue;
      for (NodeId in : regions[i].inputs) {
        if (gone.count(in) != 0) {
          return fmt::format("region {} reads %{}, which the attention writing %{} does not write",
                             i, in, f.layout.o.buffer);
        }
      }
    }
  }
  return "";
}

// Decisions about the nodes the attention regions took are about a plan that is gone.
std::vector<Decision> decisions_outside(std::vector<Decision> decisions,
                                        const std::vector<bool>& taken) {
  std::vector<Decision> kept;
  for (Decision& d : decisions) {
    const bool gone = (d.producer >= 0 && taken[static_cast<size_t>(d.producer)]) ||
                      (d.consumer >= 0 && taken[static_cast<size_t>(d.consumer)]);
    if (!gone) kept.push_back(std::move(d));
  }
  return kept;
}

// Step 6 on the cut `c` of `g` (whose outputs include the buffers the kernels read; `outputs`
// are the graph's own). Returns why it could not be done, or "".
std::string fuse_attention(Cut& c, const ir::Graph& g, const std::vector<NodeId>& outputs,
                           const std::vector<FusedAttention>& fused) {
  const AttentionRegions attention = attention_regions(fused, g);
  std::vector<int> place(c.regions.size(), -1);
  std::string why = place_attention(c.regions, fused, place);
  if (!why.empty()) return why;
  std::vector<Region> regions = c.regions;
  std::vector<bool> alive(regions.size(), true);
  why = drop_unread(regions, alive, attention, outputs, g, c.df);
  if (!why.empty()) return why;
  why = reads_unwritten(regions, alive, fused);
  if (!why.empty()) return why;
  std::vector<Region> out;
  for (size_t i = 0; i < regions.size(); ++i) {
    if (place[i] >= 0) out.push_back(attention.regions[static_cast<size_t>(place[i])]);
    if (alive[i]) out.push_back(std::move(regions[i]));
  }
  if (out.size() < attention.regions.size()) return "an attention's output has no region";
  c.decisions = decisions_outside(std::move(c.decisions), attention.taken);
  c.regions = std::move(out);
  return "";
}

Decision not_fused(const ir::Graph& g, const AttentionPattern& p, const std::string& why) {
  return Decision{p.scores, p.output, false,
                  fmt::format("attention {}: not fused, {}; it runs as GEMM, normalization, GEMM",
                              p.describe(g), why)};
}

// The attention patterns of `g` the fused kernels take, each writing its output through the
// views after it (output_views) where strides reach it; what is refused goes to `said`.
std::vector<FusedAttention> fusable_attention(const ir::Graph& g, std::vector<Decision>& said) {
  std::vector<FusedAttention> fused;
  for (AttentionPattern& p : find_attention(g)) {
    AttentionRegion a = attention_region(p);
    std::optional<AttentionLayout> l;
    // Written through the views after the output where strides reach them, else dense.
    if (const std::vector<NodeId> after = output_views(g, a.output); !after.empty()) {
      a.written = after.back();
      l = attention_layout(g, a);
      if (!l) a.written = -1;
    }
    std::string why;
    if (!l) l = attention_layout(g, a, &why);
    if (!l) {
      said.push_back(not_fused(g, p, why));
      continue;
    }
    fused.push_back({std::move(p), a, std::move(*l)});
  }
  return fused;
}

// Every attention of `fused` written dense at its output instead of through views; false when
// none was written through views.
bool write_outputs_dense(const ir::Graph& g, std::vector<FusedAttention>& fused) {
  bool changed = false;
  for (FusedAttention& f : fused) {
    if (f.region.written < 0) continue;
    f.region.written = -1;
    f.layout = *attention_layout(g, f.region);
    changed = true;
  }
  return changed;
}

}  // namespace

Plan partition(const ir::Graph& traced, const PartitionOptions& options) {
  const ir::Graph g = order_writes(traced);
  Plan plan;
  plan.graph = g;
  std::vector<FusedAttention> fused;
  std::vector<Decision> said;  // what step 6 fused or refused
  if (options.attention && options.fusion) {
    fused = fusable_attention(g, said);
    // The buffers the kernels read must be written by some region: graph outputs while cutting.
    for (const FusedAttention& f : fused) {
      for (const AttentionView* v : {&f.layout.q, &f.layout.k, &f.layout.v, &f.layout.mask}) {
        const NodeId b = v->buffer;
        if (b < 0 || g.node(b).op == ir::Op::input) continue;
        const std::vector<NodeId>& outs = plan.graph.outputs();
        if (std::find(outs.begin(), outs.end(), b) == outs.end()) plan.graph.add_output(b);
      }
    }
  }
  Cut best = cut(plan.graph, options, std::vector<bool>(plan.graph.size(), false));
  std::map<NodeId, std::string> steps;
  if (options.fusion && options.recompute) {
    best = recompute(plan.graph, options, std::move(best), steps, said);
  }
  if (!fused.empty()) {
    std::string why = fuse_attention(best, g, g.outputs(), fused);
    // A region that reads the output itself (its permute fused into that region): write it dense.
    if (!why.empty() && write_outputs_dense(g, fused))
      why = fuse_attention(best, g, g.outputs(), fused);
    if (!why.empty()) {
      // Cut again without it, saying why.
      PartitionOptions plain = options;
      plain.attention = false;
      Plan p = partition(g, plain);
      for (const FusedAttention& f : fused) p.decisions.push_back(not_fused(g, f.pattern, why));
      for (Decision& d : said) p.decisions.push_back(std::move(d));
      return p;
    }
    plan.graph.set_outputs(g.outputs());
    for (const FusedAttention& f : fused) {
      std::string kv = f.layout.k.head_group > 1 || f.layout.v.head_group > 1
                           ? fmt::format(", k and v heads read in groups of {} (no copy)",
                                         f.layout.k.head_group)
                           : "";
      said.push_back({f.pattern.scores, f.pattern.output, true,
                         fmt::format("attention {}: one kernel (online softmax; the scores "
                                     "are never written){}",
                                     f.pattern.describe(g), kv)});
      if (!f.layout.out_views.empty()) {
        said.push_back({f.pattern.output, f.layout.o.buffer, true,
                        fmt::format("the attention writes %{} through the views after its output "
                                    "(%{}): no kernel copies the output into that layout",
                                    f.layout.o.buffer, fmt::join(f.layout.out_views, ", %"))});
      }
    }
  }
  plan.regions = std::move(best.regions);
  plan.decisions = std::move(best.decisions);
  for (Decision& d : said) plan.decisions.push_back(std::move(d));
  for (Decision& d : detail::recompute_decisions(best.df, plan.regions, steps)) {
    plan.decisions.push_back(std::move(d));
  }
  for (const Region& r : plan.regions) {
    for (const WelfordPair& p : r.welford) {
      plan.decisions.push_back(
          {p.mean, p.variance, true,
           fmt::format("one-pass statistics: mean %{} and variance %{} accumulated together "
                       "(count, mean, M2; Welford within a thread, Chan between partials), one "
                       "reduction instead of two",
                       p.mean, p.variance)});
    }
  }
  return plan;
}

}  // namespace fusejit::fusion
