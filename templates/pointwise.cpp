// templates/pointwise: the kernel of a pointwise region.
//
// Structure: the outputs are grouped by element count; each group is one sweep, a grid-stride
// loop over vectors of V consecutive output elements (V = 16 bytes of the narrowest buffer,
// when every count allows it). Per vector:
//   prelude   loads shared by the V lanes: 16-byte vector loads of every input whose offset
//             moves by one per lane, scalar loads of inputs broadcast across the lanes;
//   lane loop (unrolled) evaluates the expression DAG per element (views are index
//             arithmetic; inputs with any other access pattern, such as a transpose, are
//             loaded per lane) and collects each output's lanes;
//   stores    one 16-byte (vector) store per output.
// Regions that read an input through a transposition go to templates/transpose.cpp instead
// when its conditions hold.
// Math: each node as the reference defines it, f16/bf16 computed in f32 and rounded to the
// node's dtype, integers wrapping.
#include <map>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "templates/builders.h"

namespace fusejit::templates {

std::string LaneLoads::load(ir::NodeId id, const Index& at) {
  const ir::Node& n = info_.node(id);
  const DTypeCode& code = dtype_code(n.dtype);
  const std::string param = info_.input_param(id);
  const Lane how = v_ == 1 ? Lane::other : lane(at);
  const std::string key = ExprEmitter::key(id, at);
  if (how == Lane::unit) {
    // One vector load before the lane loop; lanes pick their element.
    std::string array;
    if (auto hit = outer_.find("vec" + key)) {
      array = *hit;
    } else {
      array = fmt::format("r{}", arrays_++);
      prelude_.line("{} {}[{}];", code.storage, array, v_);
      prelude_.line("fj_load_vec({}, {} + {});", array, param, offset(at, true));
      outer_.memo["vec" + key] = array;
    }
    const std::string var = fmt::format("x{}", arrays_++);
    body_.line("const {} {} = {};", code.arith, var, wrap(code.load, fmt::format("{}[j]", array)));
    return var;
  }
  if (how == Lane::none) {
    if (auto hit = outer_.find(key)) return *hit;
    const std::string var = fmt::format("h{}", arrays_++);
    prelude_.line("const {} {} = {};", code.arith, var, load_expr(info_, id, offset(at, true)));
    outer_.memo[key] = var;
    return var;
  }
  const std::string var = fmt::format("x{}", arrays_++);
  body_.line("const {} {} = {};", code.arith, var, load_expr(info_, id, offset(at)));
  return var;
}

namespace {

constexpr int kBlock = 256;

struct Sweep {
  int64_t count = 0;
  std::vector<size_t> outputs;  // positions in region.outputs
};

// Prints one sweep into `p`; returns its number of vectors.
int64_t print_sweep(Printer& p, const RegionInfo& info, const Sweep& sweep, int v) {
  const std::string_view idx = info.index_type();
  const int64_t vectors = sweep.count / v;
  const BasePtr root =
      v > 1 ? make_lane_root("i", "i0", sweep.count, v) : make_root("i", sweep.count);

  Printer prelude, body, stores;
  Scope outer{&prelude, nullptr, {}};
  Scope inner{&body, &outer, {}};

  LaneLoads loads(info, v, prelude, body, outer);
  auto leaf = [&](ir::NodeId id, const Index& at, Scope&) { return loads.load(id, at); };
  auto no_reductions = [](ir::NodeId, const Index&) -> std::optional<std::string> {
    return std::nullopt;
  };
  ExprEmitter emitter(info, leaf, no_reductions);

  for (size_t k : sweep.outputs) {
    const ir::NodeId id = info.region.outputs[k];
    const ir::Node& n = info.node(id);
    const DTypeCode& code = dtype_code(n.dtype);
    const std::string value = emitter.value(id, index_from_root(root, n.shape), inner);
    if (v == 1) {
      body.line("out{}[i] = {};", k, wrap(code.store, value));
    } else {
      print_vector_store(prelude, body, stores, n.dtype, fmt::format("s{}", k),
                         fmt::format("out{} + i0", k), v, value);
    }
  }

  p.open("for ({} t = ({}){} * {} + ({})threadIdx.x; t < {}; t += ({})gridDim.x * {})", idx, idx,
         "blockIdx.x", kBlock, idx, vectors, idx, kBlock);
  if (v == 1) {
    p.line("const {} i = t;", idx);
    p.splice(body);
  } else {
    p.line("const {} i0 = t * {};", idx, v);
    p.splice(prelude);
    p.line("#pragma unroll");
    p.open("for (int j = 0; j < {}; ++j)", v);
    if (mentions(body.str(), "i")) p.line("const {} i = i0 + j;", idx);
    p.splice(body);
    p.close();
    p.splice(stores);
  }
  p.close();
  return vectors;
}

}  // namespace

KernelBody build_pointwise(const RegionInfo& info, const CodegenOptions& options) {
  const fusion::Region& region = info.region;
  if (region.outputs.empty()) throw InternalError("pointwise region without outputs");
  // A transposed read big enough to pay goes through shared-memory tiles; everything else
  // (including what the tiled template cannot handle) is swept linearly here.
  if (auto tiled = build_tiled_transpose(info, options)) return std::move(*tiled);
  std::map<int64_t, Sweep> by_count;
  std::vector<int64_t> order;
  for (size_t k = 0; k < region.outputs.size(); ++k) {
    const int64_t count = ir::numel(info.node(region.outputs[k]).shape);
    if (by_count.count(count) == 0) order.push_back(count);
    by_count[count].count = count;
    by_count[count].outputs.push_back(k);
  }

  KernelBody kb;
  kb.kind = "pointwise";
  kb.block = kBlock;
  kb.blocks_per_sm = info.target.blocks_per_sm(kBlock);
  std::vector<std::pair<int64_t, int>> plan;
  for (int64_t count : order)
    plan.emplace_back(count, vector_width(info, options.vectorize, {count}));
  Printer fn;
  int64_t work = 1;
  for (const auto& [count, v] : plan) {
    const int64_t vectors = print_sweep(fn, info, by_count[count], v);
    work = std::max(work, ceil_div(vectors, kBlock));
  }
  Printer& out = kb.code;
  for (const auto& [count, v] : plan) {
    out.line("// pointwise sweep over {} elements: {} per thread and iteration{}", count, v,
             v > 1 ? ", 16-byte vector accesses where contiguous" : "");
  }
  out.line("// {} index arithmetic", info.wide_index ? "64-bit" : "32-bit");
  print_signature(out, info, kBlock);
  out.splice(fn);
  out.close();
  kb.work_blocks = work;
  return kb;
}

}  // namespace fusejit::templates
