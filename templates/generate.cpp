// templates/generate: region -> Kernel. Asks the schedulers for the region's kernel, runs the
// kernel IR's passes, pastes the device helpers in front of the kernel, names the kernel after a
// hash of its source (for every kernel kind, attention's included: assemble_kernel), and
// computes launch grids; see kernel.h.
//
// Source layout (what NVRTC compiles, with no include path and no CUDA headers):
//   a header line naming the generator and its version
//   device/fj_core.cuh, fj_math.cuh, fj_memory.cuh (and fj_reduce.cuh for reductions,
//   fj_cluster.cuh for kernels whose rows are split over thread-block clusters, fj_random.cuh
//   for kernels that draw random numbers, fj_welford.cuh for kernels that accumulate a mean
//   and a variance together, fj_int8.cuh for kernels of regions with i8 values)
//   kKernelMarker, then the template's comment lines and the __global__ function
// (the attention kernel, whose scheduler is the registry's like every other: its own helpers,
// fj_core.cuh and fj_attention.cuh (KernelBody::helpers), then its comment lines and function;
// assemble_kernel writes every kernel's source this way)
#include <algorithm>
#include <cctype>
#include <functional>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/digest.h"
#include "ir/shape.h"
#include "templates/builders.h"
#include "templates/device_sources.h"
#include "templates/schedulers/registry.h"

namespace fusejit::templates {

namespace {

void check_region(const ir::Graph& g, const fusion::Region& region) {
  if (region.kind == fusion::RegionKind::gemm) {
    throw InternalError("templates::generate called for a gemm region (a cuBLASLt call)");
  }
  if (region.outputs.empty()) throw InternalError("templates::generate: region without outputs");
  std::set<ir::NodeId> known(region.nodes.begin(), region.nodes.end());
  known.insert(region.inputs.begin(), region.inputs.end());
  for (ir::NodeId id : region.outputs) {
    if (known.count(id) == 0) {
      throw InternalError(
          fmt::format("templates::generate: output %{} is neither a node nor an "
                      "input of the region",
                      id));
    }
  }
  for (ir::NodeId id : region.nodes) {
    if (id < 0 || static_cast<size_t>(id) >= g.size()) {
      throw InternalError(
          fmt::format("templates::generate: region node %{} is not in the graph", id));
    }
  }
}

// One line per computed node, naming values as the kernel does (RegionInfo::value_name: by
// their place in the region, not by node id), e.g. "// v2 = add f32[64,256] (v1, in2)".
std::string region_summary(const RegionInfo& info) {
  const fusion::Region& region = info.region;
  std::string s;
  for (ir::NodeId id : region.nodes) {
    if (info.inputs.count(id) != 0) continue;
    const ir::Node& n = info.node(id);
    s += fmt::format("// {} = {} {}", info.value_name(id), ir::op_name(n.op), info.type_str(id));
    if (!n.inputs.empty()) {
      s += " (";
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        // An update's destination is the output buffer it writes in place.
        const bool written = n.op == ir::Op::update_slice && i == 0;
        const auto out = std::find(region.outputs.begin(), region.outputs.end(), id);
        s += fmt::format("{}{}", i ? ", " : "",
                         written ? fmt::format("out{}", out - region.outputs.begin())
                                 : info.value_name(n.inputs[i]));
      }
      s += ")";
    }
    if (!n.axes.empty()) {
      s += " axes [";
      for (size_t i = 0; i < n.axes.size(); ++i) s += fmt::format("{}{}", i ? "," : "", n.axes[i]);
      s += n.keepdim ? "] keepdim" : "]";
    }
    if (n.op == ir::Op::constant) s += " = " + constant_literal(n);
    s += "\n";
  }
  return s;
}

// A region that reads, computes or writes i8 values (its kernel gets fj_int8.cuh).
bool touches_i8(const ir::Graph& g, const fusion::Region& region) {
  const auto i8 = [&](ir::NodeId id) { return g.node(id).dtype == DType::i8; };
  return std::any_of(region.nodes.begin(), region.nodes.end(), i8) ||
         std::any_of(region.inputs.begin(), region.inputs.end(), i8);
}

bool draws_random(const ir::Graph& g, const fusion::Region& region) {
  return std::any_of(region.nodes.begin(), region.nodes.end(), [&](ir::NodeId id) {
    return ir::op_kind(g.node(id).op) == ir::OpKind::random;
  });
}

}  // namespace

std::string_view device_source(std::string_view name) {
  for (const DeviceFile& f : device_files()) {
    if (f.name == name) return f.text;
  }
  throw InternalError(fmt::format("no embedded device helper named {}", name));
}

void wait_for_grid(KernelBody& body, const kir::Block& before) {
  if (body.grid_dependency) throw InternalError("wait_for_grid: the kernel waits already");
  kir::Block first;
  first.splice(before);
  first.eval(kir::call("fj_grid_dependency_wait", {}),
             "the grid ahead in the stream has finished: its results may be read");
  first.splice(body.fn.body);
  body.fn.body = std::move(first);
  launch_dependents_first(body);
}

void trigger_dependents(KernelBody& body) {
  if (body.grid_dependency || body.triggers_dependents)
    throw InternalError("trigger_dependents: the kernel triggers already");
  kir::Block first;
  first.eval(kir::call("fj_grid_dependents_launch", {}),
             "the grid after this one may be scheduled beside it (it waits for this one to end)");
  first.splice(body.fn.body);
  body.fn.body = std::move(first);
  body.triggers_dependents = true;
}

void launch_dependents_first(KernelBody& body) {
  if (body.grid_dependency)
    throw InternalError("launch_dependents_first: the kernel waits already");
  trigger_dependents(body);
  body.grid_dependency = true;
}

kir::Block& last_block_to_arrive(kir::Block& b, const kir::ExprP& count, const kir::ExprP& last,
                                 int64_t pieces) {
  b.eval(kir::fence());
  b.eval(kir::sync_block());
  kir::Block& counter = b.branch(kir::infix(kir::thread_index(), "==", kir::lit(0)));
  counter.eval(kir::fence());
  const kir::ExprP arrived = kir::atomic_add(kir::prefix("&", count), kir::lit("1u"));
  counter.assign(last, kir::infix(arrived, "==", kir::lit(fmt::format("{}u", pieces - 1))));
  b.eval(kir::sync_block());
  kir::Block& mine = b.branch(last);
  mine.eval(kir::fence());
  return mine;
}

void reset_split_count(kir::Block& last, const kir::ExprP& count) {
  last.branch_line(kir::infix(kir::thread_index(), "==", kir::lit(0)))
      .assign(count, kir::lit("0u"));
}

Kernel assemble_kernel(const KernelBody& body, const std::vector<std::string_view>& helpers,
                       std::string_view preamble) {
  std::string source = fmt::format(
      "// Generated by fusejit (codegen version {}). Device helpers from "
      "templates/device, then the kernel.\n",
      kCodegenVersion);
  std::vector<std::string_view> pasted = helpers;
  if ((body.grid_dependency || body.triggers_dependents) &&
      std::find(pasted.begin(), pasted.end(), "fj_pdl.cuh") == pasted.end())
    pasted.push_back("fj_pdl.cuh");
  for (std::string_view h : pasted) {
    source += fmt::format("\n// ==== {} ====\n", h);
    source += device_source(h);
  }
  source += "\n";
  source += kKernelMarker;
  source += "\n";
  source += preamble;
  source += kir::print(body.fn);

  const std::string name = fmt::format("fj_{}_{:016x}", body.kind, ir::hash64(source));
  for (size_t pos = source.find(kKernelNameToken); pos != std::string::npos;
       pos = source.find(kKernelNameToken, pos)) {
    source.replace(pos, kKernelNameToken.size(), name);
  }
  Kernel k;
  k.name = name;
  k.source = std::move(source);
  k.cluster = body.fn.cluster;  // __cluster_dims__ in the source
  k.relaxed_min_blocks = body.fn.relaxed_min_blocks;
  k.block = body.block;
  k.work_blocks = body.work_blocks;
  k.blocks_per_sm = body.blocks_per_sm;
  k.shared_bytes = body.shared_bytes;
  k.serial_launches = body.serial_launches;
  k.waves = body.waves;
  k.programmatic = body.grid_dependency;
  return k;
}

namespace {

// The kernel IR after each step, kept for FUSEJIT_DUMP=kir when the options ask for it.
class KirSteps {
 public:
  explicit KirSteps(const CodegenOptions& options) : keep_(options.keep_kir) {}
  void add(std::string_view step, const kir::Function& f) {
    if (keep_) text_ += fmt::format("// ==== {} ====\n{}", step, kir::dump(f));
  }
  std::string take() { return std::move(text_); }

 private:
  bool keep_;
  std::string text_;
};

// The kernel of the first scheduler that takes the region (schedulers/registry.h), built from
// the parameters it picks, its declarations placed and checked; each step into `steps`.
KernelBody build_body(const RegionInfo& info, const CodegenOptions& options,
                      KirSteps* steps = nullptr) {
  const Schedule chosen = schedule(info, options);
  KernelBody body = chosen.scheduler->build(info, options, chosen.params);
  body.schedule = schedule_text(chosen);
  if (options.grid_dependency) {
    wait_for_grid(body);
  } else if (options.gemv_grid_dependency) {
    trigger_dependents(body);
  }
  if (steps) steps->add("built", body.fn);
  kir::place_declarations(body.fn);
  if (steps) steps->add("declarations placed", body.fn);
  kir::verify(body.fn);
  return body;
}

// A region's kernel: its device helpers and its summary (or the kernel's own helpers, and no
// summary: KernelBody::helpers), its parameters.
// `runtime`: a dynamic kernel's runtime extents (fj_fastdiv.cuh where it has any).
Kernel assemble_region(const RegionInfo& info, const KernelBody& body,
                       RuntimeExtents* runtime = nullptr) {
  std::vector<std::string_view> helpers = body.helpers;
  std::string summary;
  if (helpers.empty()) {
    helpers = {"fj_core.cuh", "fj_math.cuh", "fj_memory.cuh"};
    if (body.reduces) helpers.push_back("fj_reduce.cuh");
    if (body.fn.cluster > 1) helpers.push_back("fj_cluster.cuh");
    if (draws_random(info.graph, info.region)) helpers.push_back("fj_random.cuh");
    if (body.welford) helpers.push_back("fj_welford.cuh");
    if (body.stages) helpers.push_back("fj_stage.cuh");
    if (runtime != nullptr && !runtime->extents.empty()) helpers.push_back("fj_fastdiv.cuh");
    if (touches_i8(info.graph, info.region)) helpers.push_back("fj_int8.cuh");
    summary = fmt::format("// {} region\n", body.kind) + region_summary(info);
  }
  Kernel k = assemble_kernel(body, helpers, summary);
  k.params = info.region.inputs;
  k.params.insert(k.params.end(), info.region.outputs.begin(), info.region.outputs.end());
  return k;
}

}  // namespace

Kernel generate(const ir::Graph& g, const fusion::Region& region, const CodegenOptions& options) {
  check_region(g, region);
  const RegionInfo info(g, region, options);
  KirSteps steps(options);
  KernelBody body = build_body(info, options, &steps);
  kir::lower_indices(body.fn);
  steps.add("indices lowered", body.fn);
  Kernel k = assemble_region(info, body);
  k.kir = steps.take();
  k.schedule = body.schedule;
  return k;
}

namespace {

// What generate_dynamic needs: a valid region, an outer extent that the symbols make up (odd
// unless some symbol is aligned), the symbols' values, an alignment per symbol (a power of two)
// or none. A violation is the caller's bug.
void check_dynamic_request(const ir::Graph& g, const fusion::Region& region,
                           const DynamicSizes& sizes) {
  check_region(g, region);
  const bool aligned =
      std::any_of(sizes.alignment.begin(), sizes.alignment.end(), [](int64_t a) { return a > 1; });
  const bool divides = std::any_of(sizes.symbols.begin(), sizes.symbols.end(),
                                   [&](int64_t v) { return v > 1 && sizes.outer % v == 0; });
  if (sizes.outer < 1 || (!aligned && sizes.outer % 2 == 0) || !divides) {
    throw InternalError(fmt::format(
        "generate_dynamic: the outer extent {} must be odd and a product of the symbols' values",
        sizes.outer));
  }
  for (int64_t a : sizes.alignment) {
    if (a < 1 || (a & (a - 1)) != 0) {
      throw InternalError(fmt::format("generate_dynamic: alignment {} is not a power of two", a));
    }
  }
  if (!sizes.alignment.empty() && sizes.alignment.size() != sizes.symbols.size()) {
    throw InternalError("generate_dynamic: an alignment per symbol, or none");
  }
}

// `numbers` as static coefficients times powers of the symbols, whose values are `symbols`.
std::vector<ir::DimTerms> decode(const std::vector<int64_t>& numbers,
                                 const std::vector<int64_t>& symbols) {
  std::vector<ir::Symbol> named;
  for (int64_t v : symbols) named.push_back(ir::Symbol{.name = {}, .sentinel = v, .example = v});
  std::vector<ir::DimTerms> out;
  for (int64_t n : numbers) out.push_back(ir::dim_terms(n, named));
  return out;
}

// "64*sym0*sym1": a runtime extent in a parameter's comment (the kernel does not know the
// symbols' names, and its source must not depend on them).
std::string terms_text(const ir::DimTerms& t) {
  std::string s = t.coefficient == 1 ? "" : std::to_string(t.coefficient);
  for (size_t k = 0; k < t.exponents.size(); ++k) {
    for (int e = 0; e < t.exponents[k]; ++e) s += fmt::format("{}sym{}", s.empty() ? "" : "*", k);
  }
  return s;
}

// The runtime extents lowering registered, decoded into the kernel's `k`, their variables
// added to the function as arguments; the reason when there is no dynamic kernel.
std::optional<std::string> runtime_arguments(const RegionInfo& info, const RuntimeExtents& runtime,
                                             KernelBody& body, Kernel& k) {
  if (runtime.extents.empty()) return std::nullopt;
  if (info.wide_index) {
    return "its index arithmetic divides by a runtime extent, and needs 64 bits (fast division "
           "is 32-bit)";
  }
  k.runtime_extents = decode(runtime.extents, runtime.symbols);
  k.dividend_bounds = decode(runtime.dividend_bounds, runtime.symbols);
  for (size_t e = 0; e < k.runtime_extents.size(); ++e) {
    body.fn.params.push_back(kir::Param{runtime.extent_vars[e], false,
                                        "runtime extent " + terms_text(k.runtime_extents[e]),
                                        false});
    body.fn.params.push_back(
        kir::Param{runtime.multiplier_vars[e], false,
                   fmt::format("fj_e{}'s fast division: multiplier | shift << 32", e), false});
  }
  return std::nullopt;
}

// A register path's launch facts: its row length, which of the kernel's runtime extents it is,
// and the rows it serves.
void set_row_path(Kernel& k, const DynamicSizes& sizes, const KernelBody& body) {
  if (body.max_row_length == 0) return;
  // The row length is one of the runtime extents: the one of its value (the symbols are
  // distinct primes dividing no static coefficient, so no other monomial has it).
  const auto length = std::find_if(
      k.runtime_extents.begin(), k.runtime_extents.end(),
      [&](const ir::DimTerms& t) { return t.value(sizes.symbols) == body.row_length; });
  if (length == k.runtime_extents.end()) {
    throw InternalError(
        fmt::format("generate_dynamic: the register path's row length ({}) is "
                    "not among its runtime extents",
                    body.row_length));
  }
  k.row_length = *length;
  k.max_row_length = body.max_row_length;
  k.min_row_length = body.min_row_length;
  k.rows_per_block = body.rows_per_block;
}

// Whether `n` is one of the region's sizes that change with the symbols: a product of adjacent
// dims of one of its nodes (a dim, a row, a block of rows, a whole tensor) that a symbol's value
// divides, or a multiple of the outer extent.
std::function<bool(int64_t)> region_sizes(const RegionInfo& info, const DynamicSizes& sizes) {
  auto known = std::make_shared<std::set<int64_t>>();
  for (const auto* ids : {&info.region.inputs, &info.region.nodes, &info.region.outputs}) {
    for (ir::NodeId id : *ids) {
      const Shape& shape = info.node(id).shape;
      for (size_t lo = 0; lo < shape.size(); ++lo) {
        int64_t product = 1;
        for (size_t hi = lo; hi < shape.size(); ++hi) {
          product *= shape[hi];
          if (info.symbolic(product)) known->insert(product);
        }
      }
    }
  }
  const int64_t outer = sizes.outer;
  return [known, outer](int64_t n) { return n % outer == 0 || known->count(n) != 0; };
}

// The body of a dynamic kernel, built once with its sizes as parameters and lowered (its
// runtime extents registered in `runtime`); the reason when there is none.
std::optional<std::string> build_dynamic(const RegionInfo& info, const DynamicSizes& sizes,
                                         const CodegenOptions& options, RuntimeExtents& runtime,
                                         KernelBody& body, KirSteps& steps) {
  try {
    body = build_body(info, options, &steps);
  } catch (const NotSizeIndependent& e) {
    return e.what();
  }
  if (body.items_per_outer == 0 || body.serial_launches || body.fn.cluster > 1) {
    return fmt::format("the {} kernel's schedule depends on its size", body.kind);
  }
  if (sizes.row_path > 0 && body.max_row_length == 0) {
    return fmt::format("the {} kernel has no register path: its row length (if any) is fixed",
                       body.kind);
  }
  kir::lower_indices(body.fn, &runtime);  // numbers its runtime extents
  if (auto where = kir::symbolic_constant(body.fn, region_sizes(info, sizes))) {
    return "the kernel depends on its sizes beyond its loop bounds and runtime extents: " + *where;
  }
  return std::nullopt;
}

}  // namespace

// Why one build makes a kernel for every outer extent O <= sizes.outer. The region's graph is
// one instance of a symbolic graph: every dim is a static coefficient times powers of the
// symbols, the symbols at distinct primes (or aligned multiples of them) that divide no static
// coefficient, so a count changes with the symbols exactly when a symbol's value divides it
// (RegionInfo::symbolic), and then decodes to its dims. The kernel's sizes are parameters of its
// IR, and a builder gets a size only in forms that hold at every size:
//   - loop bounds over the outer block are a fixed count per outer unit times fj_outer
//     (outer_extent, lower.h; RegionInfo::per_outer refuses a count the outer extent does not
//     divide, or whose quotient still changes with the symbols);
//   - every number of the index arithmetic that a symbol's value divides (the `% (H*S)` of a
//     table broadcast over one symbol of two, the `/ (D*B)` and place `D*S` of a permute moving
//     a dynamic axis inward) and every count a builder takes as kir::extent (a row length, a
//     mean's divisor) is a runtime extent: fj_e<k>, with fj_fastdiv / fj_fastmod over fj_m<k>
//     for divisions and modulos (fastdiv.h, index.cpp). The digit bookkeeping only multiplies
//     extents and splits them where one divides another, and divisibility between such numbers
//     at these values is divisibility of the monomials themselves, so every step of the index
//     analysis that compares numbers decides here what it decides at every size, except a
//     modulo left out because d * e reached the base's bound: with runtime extents it is left
//     out only where d * e is that bound;
//   - what a scheduler decides from a count (a vector width, a guard) it takes from counts per
//     outer unit or from counts whose divisibility by a power of two an odd prime leaves as it
//     is; a schedule that needs a count that changes with the symbols (rows split over blocks
//     or clusters, a tiled transpose, column reductions, attention) throws NotSizeIndependent
//     naming it, and a schedule with no fixed work per outer unit sets no items_per_outer.
// What would still slip through as a constant, one of the region's sizes (a concat's boundary
// along a dynamic axis, a bound of the whole sweep), is refused by kir::symbolic_constant after
// lowering. Sizes in
// comments and in the region summary print per outer unit or as `?`.
//
// Aligned instances (DynamicSizes::alignment A > 1 for some symbols): their values are A times
// distinct odd primes, and the kernel serves only sizes where A divides each of them. The
// numbers decode as before (a value divides a number or not), and every decision taken from a
// count's divisibility by a power of two (a vector width, a dropped guard) holds at every such
// size, where the count is divisible by at least as high a power of two; a decision that a
// count is not divisible leaves a guard or a narrower vector, which is correct at any size.
std::optional<Kernel> generate_dynamic(const ir::Graph& g, const fusion::Region& region,
                                       const DynamicSizes& sizes, const CodegenOptions& options,
                                       std::string* why) {
  const auto refuse = [&](std::string reason) -> std::optional<Kernel> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  for (ir::NodeId out : region.outputs) {
    if (g.node(out).op == ir::Op::update_slice) {
      return refuse("a kernel that writes an update_slice is generated for each size");
    }
  }
  check_dynamic_request(g, region, sizes);
  RegionInfo info(g, region, options);
  info.make_dynamic(sizes);
  info.row_path = sizes.row_path;
  RuntimeExtents runtime{.symbols = sizes.symbols};
  KernelBody body;
  KirSteps steps(options);
  if (auto reason = build_dynamic(info, sizes, options, runtime, body, steps)) {
    return refuse(std::move(*reason));
  }
  Kernel k;
  if (auto reason = runtime_arguments(info, runtime, body, k)) return refuse(std::move(*reason));
  kir::verify(body.fn);  // every fj_e<k> and fj_m<k> read is now a parameter
  steps.add("indices lowered (runtime extents as arguments)", body.fn);
  const std::vector<ir::DimTerms> extents = std::move(k.runtime_extents);
  const std::vector<ir::DimTerms> bounds = std::move(k.dividend_bounds);
  k = assemble_region(info, body, &runtime);
  k.kir = steps.take();
  k.schedule = body.schedule;
  k.dynamic = true;
  k.max_outer = sizes.outer;
  k.items_per_outer = body.items_per_outer;
  k.items_per_block = body.items_per_block;
  k.work_blocks = work_blocks_at(k, sizes.outer);
  k.runtime_extents = extents;
  k.dividend_bounds = bounds;
  k.max_elements = info.wide_index ? 0 : kNarrowIndexLimit;
  k.alignment = sizes.alignment;
  set_row_path(k, sizes, body);
  return k;
}

int dynamic_variants(const ir::Graph& g, const fusion::Region& region, const DynamicSizes& sizes,
                     const CodegenOptions& options) {
  check_dynamic_request(g, region, sizes);
  RegionInfo info(g, region, options);
  info.make_dynamic(sizes);
  return scheduler_for(info, options).variants(info, options);
}

int64_t work_blocks_at(const Kernel& k, int64_t outer, int64_t row_length) {
  if (!k.dynamic) {
    if (outer != 0) {
      throw InternalError(fmt::format("kernel {} is static, launched for outer extent {}", k.name,
                                      outer));
    }
    return k.work_blocks;
  }
  if (outer < 1 || outer > k.max_outer) {
    throw InternalError(fmt::format("dynamic kernel {} serves outer extents 1 to {}, not {}",
                                    k.name, k.max_outer, outer));
  }
  const int64_t per_block = k.rows_per_block > 0 && row_length > 0
                                ? std::max(k.items_per_block, k.rows_per_block * row_length)
                                : k.items_per_block;
  return std::max<int64_t>(1, ceil_div(k.items_per_outer * outer, per_block));
}

int64_t launch_grid(const Kernel& k, int sm_count, int64_t outer, int64_t row_length) {
  const int64_t wave = static_cast<int64_t>(std::max(sm_count, 1)) * std::max(k.blocks_per_sm, 1);
  const int64_t work = work_blocks_at(k, outer, row_length);
  // CUDA's grid is at most 2^31 - 1 blocks in x; every kernel loops over the rest with a grid
  // stride, so a tensor near the size limit (ir/shape.h) still launches.
  constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
  const int64_t grid = std::min(k.waves > 0 ? std::min(work, wave * k.waves) : work, kMaxGridX);
  const int64_t cluster = std::max(k.cluster, 1);
  return std::max(cluster, grid - grid % cluster);
}

}  // namespace fusejit::templates
