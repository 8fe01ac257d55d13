// templates/pointwise: the kernel of a pointwise region.
//
// Structure: the outputs are grouped by element count; each group is one sweep, a grid-stride
// loop over vectors of V consecutive output elements (V = 16 bytes of the narrowest buffer),
// then a scalar tail for the last count % V elements (a dynamic kernel's V divides every count
// instead). Per vector:
//   prelude   loads shared by the V lanes: 16-byte vector loads of every input whose offset
//             moves by one per lane, scalar loads of inputs broadcast across the lanes;
//   lane loop (unrolled) evaluates the expression DAG per element (views are index
//             arithmetic; inputs with any other access pattern, such as a transpose, are
//             loaded per lane) and collects each output's lanes;
//   stores    one 16-byte (vector) store per output.
// Regions that read an input through a transposition go to templates/schedulers/transpose.cpp
// instead when its conditions hold. Math: each node as the reference defines it, f16/bf16 computed
// in f32 and rounded to the node's dtype, integers wrapping.
#include <algorithm>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "templates/builders.h"
#include "templates/schedulers/registry.h"

namespace fusejit::templates {

kir::ExprP LaneLoads::load(ir::NodeId id, const Index& at) {
  const ir::Node& n = info_.node(id);
  const DTypeCode& code = dtype_code(n.dtype);
  const kir::ExprP param = kir::var(info_.input_var(id));
  const Lane how = v_ == 1 ? Lane::other : lane(at);
  if (how == Lane::unit) {
    // One vector load before the lane loop; lanes pick their element.
    const ValueKey key = value_key(id, at, Held::vector);
    kir::ExprP array = outer_.find(key);
    if (!array) {
      array = prelude_.array(std::string(code.storage), fmt::format("r{}", arrays_++), v_);
      prelude_.eval(kir::load_vec(array, kir::add(param, kir::offset(at, true))));
      outer_.memo[key] = array;
    }
    return body_.let(std::string(code.arith), fmt::format("x{}", arrays_++),
                     apply(code.load, kir::subscript(array, lane_)));
  }
  if (how == Lane::none) {
    const ValueKey key = value_key(id, at);
    if (kir::ExprP hit = outer_.find(key)) return hit;
    kir::ExprP var = prelude_.let(std::string(code.arith), fmt::format("h{}", arrays_++),
                                  templates::load(info_, id, kir::offset(at, true)));
    outer_.memo[key] = var;
    return var;
  }
  return body_.let(std::string(code.arith), fmt::format("x{}", arrays_++),
                   templates::load(info_, id, kir::offset(at)));
}

namespace {

constexpr int kBlock = 256;

struct Sweep {
  int64_t count = 0;
  std::vector<size_t> outputs;  // positions in region.outputs
};

// for (t = blockIdx.x * block + threadIdx.x; t < bound; t += gridDim.x * block)
kir::Loop grid_stride_loop(kir::Block& out, const std::string& idx, kir::ExprP bound) {
  return out.loop(idx, "t",
                  kir::add(kir::mul(kir::cast(idx, kir::block_index()), kir::lit(kBlock)),
                           kir::cast(idx, kir::thread_index())),
                  std::move(bound), kir::mul(kir::cast(idx, kir::grid_blocks()), kir::lit(kBlock)));
}

// The element a sweep's loop stands at: i (v = 1), or the lanes i0 + j (i0 a multiple of v),
// with i declared in the lane loop; `root` the index's root, i or the lane root over i and i0.
struct Element {
  kir::VarP i, i0, j;
  BasePtr root;
};

// Appends to `loop` the sweep's outputs at the linear position `at` (digits over the whole
// sweep of `e.root`): the element i (declared before, v = 1), or the v lanes i0 + j (i0
// declared before) through one vector load per contiguous input and one vector store per
// output.
void add_elements(kir::Block& loop, const RegionInfo& info, const Sweep& sweep, int v,
                  const Element& e) {
  kir::Block prelude, body, stores;
  ValueScope outer{&prelude, nullptr, {}};
  ValueScope inner{&body, &outer, {}};
  const Digits at = {Digit{e.root, 1, sweep.count}};

  LaneLoads loads(info, v, e.j ? kir::var(e.j) : nullptr, prelude, body, outer);
  Values values(info,
                [&](ir::NodeId id, const Index& at, ValueScope&) { return loads.load(id, at); });

  for (size_t k : sweep.outputs) {
    const ir::NodeId id = info.region.outputs[k];
    const ir::Node& n = info.node(id);
    const kir::ExprP dst = kir::var(info.output_var(k));
    if (n.op == ir::Op::update_slice) {  // its value's element, stored where it lands
      const Index element = index_from_digits(at, ir::computed_shape(info.graph, id));
      const kir::ExprP value = values.value(n.inputs[1], element, inner);
      body.assign(kir::subscript(dst, values.update_offset(id, element, inner)),
                  apply(dtype_code(n.dtype).store, value));
      continue;
    }
    const kir::ExprP value = values.value(id, index_from_digits(at, n.shape), inner);
    if (v == 1) {
      body.assign(kir::subscript(dst, kir::var(e.i)), apply(dtype_code(n.dtype).store, value));
    } else {
      vector_store(prelude, body, stores, n.dtype, fmt::format("s{}", k),
                   kir::add(dst, kir::var(e.i0)), v, value, kir::var(e.j));
    }
  }
  if (v == 1) {
    loop.splice(body);
    return;
  }
  const std::string idx(info.index_type());
  loop.splice(prelude);
  kir::Block& lanes = loop.loop(e.j, kir::lit(0), kir::lit(v), nullptr, 1);
  lanes.let_if_read(e.i, kir::add(kir::var(e.i0), kir::var(e.j)));
  lanes.splice(body);
  loop.splice(stores);
}

// Adds one sweep to `out`; returns its number of vectors (per outer unit, in a dynamic kernel).
// Vector body and scalar tail: the first count / v * v elements in vectors of v lanes, the
// last count % v (0 in a dynamic kernel, whose v divides every count) one per thread.
int64_t add_sweep(kir::Block& out, const RegionInfo& info, const Sweep& sweep, int v) {
  const std::string idx(info.index_type());
  const int64_t vectors = sweep.count / v;
  const int64_t tail = sweep.count % v;
  const auto [loop, t] =
      grid_stride_loop(out, idx, outer_extent(info, vectors, "a sweep's vectors"));
  if (v == 1) {
    const kir::ExprP i = loop.let(idx, "i", t);
    add_elements(loop, info, sweep, 1, {i->var, nullptr, nullptr, make_root(i->var, sweep.count)});
  } else {
    const kir::ExprP i0 = loop.let(idx, "i0", kir::mul(t, kir::lit(v)));
    // The lanes run below vectors * v only, which is the lane root's bound; the element index
    // spans the whole sweep (a digit wider than its root's bound, which lane analysis allows).
    const kir::VarP i = kir::variable(idx, "i");
    const BasePtr lanes = make_lane_root(i, i0->var, vectors * v, v);
    add_elements(loop, info, sweep, v, {i, i0->var, kir::variable("int", "j"), lanes});
  }
  if (tail != 0) {
    if (info.dynamic()) throw InternalError("a dynamic pointwise sweep with a scalar tail");
    const auto [rest, t_rest] = grid_stride_loop(out, idx, kir::lit(tail));
    const kir::ExprP i = rest.let(idx, "i", kir::add(kir::lit(vectors * v), t_rest));
    add_elements(rest, info, sweep, 1, {i->var, nullptr, nullptr, make_root(i->var, sweep.count)});
  }
  return info.per_outer(vectors, "a sweep's vectors");
}

}  // namespace

namespace {

// The region's outputs grouped by element count (what the kernel computes of each: an update
// only its value), in the order of their first output.
std::vector<Sweep> sweeps_of(const RegionInfo& info) {
  std::vector<Sweep> sweeps;
  for (size_t k = 0; k < info.region.outputs.size(); ++k) {
    const int64_t count = ir::numel(ir::computed_shape(info.graph, info.region.outputs[k]));
    auto it = std::find_if(sweeps.begin(), sweeps.end(),
                           [&](const Sweep& s) { return s.count == count; });
    if (it == sweeps.end()) it = sweeps.insert(sweeps.end(), Sweep{count, {}});
    it->outputs.push_back(k);
  }
  return sweeps;
}

// Whether the sweep writes an update_slice: one element per thread and iteration (its stores
// land at a position loaded at run time).
bool writes_update(const RegionInfo& info, const Sweep& sweep) {
  return std::any_of(sweep.outputs.begin(), sweep.outputs.end(), [&](size_t k) {
    return info.node(info.region.outputs[k]).op == ir::Op::update_slice;
  });
}

// A static sweep takes the full vector width whatever its count (a scalar tail takes the
// rest), unless the count is below it. A dynamic kernel sweeps count = per_outer * outer
// elements for any outer: its vector width divides per_outer, so that it divides every such
// count and there is no tail.
PointwiseParams sweep_params(const RegionInfo& info, const CodegenOptions& options) {
  PointwiseParams p;
  p.block = kBlock;
  p.waves = 0;  // nothing per block to amortize: one block per 256 vectors
  for (const Sweep& sweep : sweeps_of(info)) {
    if (writes_update(info, sweep)) {
      p.vector_widths.push_back(1);
      continue;
    }
    const int64_t per_outer = info.per_outer(sweep.count, "an output's elements");
    const int full = vector_width(info, options.vectorize, {});
    const bool with_tail = !info.dynamic() && sweep.count >= full;
    p.vector_widths.push_back(with_tail ? full
                                        : vector_width(info, options.vectorize, {per_outer}));
  }
  return p;
}

KernelBody build_sweeps(const RegionInfo& info, const PointwiseParams& p) {
  const std::vector<Sweep> sweeps = sweeps_of(info);
  if (sweeps.size() != p.vector_widths.size()) {
    throw InternalError(fmt::format("pointwise parameters for {} sweeps, not {}",
                                    p.vector_widths.size(), sweeps.size()));
  }
  KernelBody kb;
  kb.kind = "pointwise";
  kb.block = static_cast<int>(p.block);
  kb.blocks_per_sm = info.target.blocks_per_sm(kb.block);
  kb.waves = static_cast<int>(p.waves);
  kb.fn = kernel_function(info, kb.block);
  for (size_t s = 0; s < sweeps.size(); ++s) {
    const int64_t count = sweeps[s].count;
    const int64_t v = p.vector_widths[s];
    const int64_t tail = count % v;
    kb.fn.head.comment("pointwise sweep over {} elements{}: {} per thread and iteration{}{}",
                       info.per_outer(count, "an output's elements"),
                       info.dynamic() ? " per outer unit" : "", v,
                       v > 1 ? ", 16-byte vector accesses where contiguous" : "",
                       tail > 0 ? fmt::format("; the last {} one per thread", tail) : "");
  }
  kb.fn.head.comment("{} index arithmetic", info.wide_index ? "64-bit" : "32-bit");
  int64_t items = 1;  // the longest sweep's vectors (per outer unit)
  for (size_t s = 0; s < sweeps.size(); ++s) {
    items = std::max(items,
                     add_sweep(kb.fn.body, info, sweeps[s], static_cast<int>(p.vector_widths[s])));
  }
  kb.items_per_outer = items;
  kb.items_per_block = p.block;
  // (A dynamic kernel's blocks follow its outer extent at launch: Kernel::items_per_outer.)
  kb.work_blocks = ceil_div(items, p.block);
  return kb;
}

// Every pointwise region the tiled transpose does not take (including what it cannot handle).
class PointwiseScheduler final : public Scheduler {
 public:
  std::string_view name() const override { return "pointwise"; }
  std::optional<std::string> refusal(const RegionInfo& info, const CodegenOptions&) const override {
    if (info.region.kind != fusion::RegionKind::pointwise) return "not a pointwise region";
    return std::nullopt;
  }
  ScheduleParams params(const RegionInfo& info, const CodegenOptions& options) const override {
    return sweep_params(info, options);
  }
  KernelBody build(const RegionInfo& info, const CodegenOptions&,
                   const ScheduleParams& params) const override {
    return build_sweeps(info, std::get<PointwiseParams>(params));
  }
};

}  // namespace

const Scheduler& pointwise_scheduler() {
  static const PointwiseScheduler scheduler;
  return scheduler;
}

}  // namespace fusejit::templates
