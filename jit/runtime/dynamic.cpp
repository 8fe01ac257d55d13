// jit/dynamic: see dynamic.h.
#include "jit/runtime/dynamic.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <unordered_map>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/hash.h"
#include "jit/libs/gemm_call.h"
#include "templates/emit.h"
#include "templates/kir/fastdiv.h"

namespace fusejit::jit {

namespace {

// Symbol k's power in the element count of `shape`, per symbol, and its static part.
ir::DimTerms numel_terms(const Shape& shape, const std::vector<ir::Symbol>& symbols) {
  ir::DimTerms total;
  total.exponents.assign(symbols.size(), 0);
  for (int64_t d : shape) {
    const ir::DimTerms t = ir::dim_terms(d, symbols);
    total.coefficient *= t.coefficient;
    for (size_t k = 0; k < symbols.size(); ++k) total.exponents[k] += t.exponents[k];
  }
  return total;
}

// The largest value the symbols may take when a dynamic kernel is generated: as large as keeps
// every node of the plan at or under `limit` elements (so kernels index with 32 bits or 32-bit
// arithmetic and serve every size up to it), at most 2^15; with symbol k taking `alignment[k]`
// times that value (empty: 1 for each). 0 when that leaves too little room to be worth a
// kernel.
int64_t generation_ceiling(const fusion::Plan& plan, const std::vector<ir::Symbol>& symbols,
                           double limit, const std::vector<int64_t>& alignment) {
  double v = 32767;
  for (const ir::Node& n : plan.graph.nodes()) {
    const ir::DimTerms t = numel_terms(n.shape, symbols);
    int degree = 0;
    auto scale = static_cast<double>(t.coefficient);
    for (size_t k = 0; k < t.exponents.size(); ++k) {
      degree += t.exponents[k];
      if (k < alignment.size()) {
        scale *= std::pow(static_cast<double>(alignment[k]), t.exponents[k]);
      }
    }
    if (degree == 0) continue;
    v = std::min(v, std::floor(std::pow(limit / scale, 1.0 / degree)));
  }
  const auto value = static_cast<int64_t>(v);
  return value >= 9 ? value : 0;
}

// The symbols' values a dynamic kernel is generated at: the largest odd primes at most
// `ceiling` that divide no static coefficient of the plan (so every outer extent is odd, and a
// count of a kernel changes with the symbols exactly when one of them divides it, decoding to
// its dims: templates/kir/fastdiv.h). Empty when there are not enough such primes.
ir::Bindings generation_values(const fusion::Plan& plan, const std::vector<ir::Symbol>& symbols,
                               int64_t ceiling) {
  std::vector<int64_t> coefficients;
  for (const ir::Node& n : plan.graph.nodes()) {
    for (int64_t d : n.shape) coefficients.push_back(ir::dim_terms(d, symbols).coefficient);
  }
  // ir::sentinel_candidates lists the primes below 2^15 that divide no static coefficient,
  // largest first (a few milliseconds for all of them, once per symbolic trace).
  std::vector<int64_t> primes;
  for (int64_t p : ir::sentinel_candidates(coefficients)) {
    if (p <= ceiling && primes.size() < symbols.size()) primes.push_back(p);
  }
  if (primes.size() < symbols.size()) return {};
  return primes;
}

std::vector<int> region_exponents(const fusion::Plan& plan, const fusion::Region& r,
                                  const std::vector<ir::Symbol>& symbols) {
  std::vector<int> e(symbols.size(), 0);
  auto add = [&](const std::vector<ir::NodeId>& ids) {
    for (ir::NodeId id : ids) {
      const ir::DimTerms t = numel_terms(plan.graph.node(id).shape, symbols);
      for (size_t k = 0; k < e.size(); ++k) e[k] = std::max(e[k], t.exponents[k]);
    }
  };
  add(r.inputs);
  add(r.nodes);
  add(r.outputs);
  return e;
}

int64_t power_product(const std::vector<int>& exponents, const ir::Bindings& values) {
  int64_t p = 1;
  for (size_t k = 0; k < exponents.size(); ++k) {
    for (int i = 0; i < exponents[k]; ++i) p *= values[k];
  }
  return p;
}

// The sizes a region whose outer extent has these exponents is generated at.
templates::DynamicSizes dynamic_sizes(const std::vector<int>& exponents, const ir::Bindings& at,
                                      std::vector<int64_t> alignment, int row_path) {
  return templates::DynamicSizes{.outer = power_product(exponents, at),
                                 .symbols = at,
                                 .alignment = std::move(alignment),
                                 .row_path = row_path};
}

// Whether every node of the region has at most `limit` elements at `values`.
bool region_fits(const DynamicPlan& plan, size_t region, const ir::Bindings& values,
                 int64_t limit) {
  const fusion::Region& r = plan.plan.regions[region];
  for (const auto* ids : {&r.inputs, &r.nodes, &r.outputs}) {
    for (ir::NodeId id : *ids) {
      const ir::DimTerms t = numel_terms(plan.plan.graph.node(id).shape, plan.symbols);
      // Compared in double: a product of four symbols can pass 2^63.
      double n = static_cast<double>(t.coefficient);
      for (size_t k = 0; k < t.exponents.size(); ++k) {
        n *= std::pow(static_cast<double>(values[k]), t.exponents[k]);
      }
      if (n > static_cast<double>(limit)) return false;
    }
  }
  return true;
}

// "S, 64*S": a kernel's runtime extents, for the plan's reasons.
std::string extents_text(const templates::Kernel& k, const std::vector<ir::Symbol>& symbols) {
  ir::Bindings sentinels;  // the encoded dim is the dim at the sentinels
  for (const ir::Symbol& sym : symbols) sentinels.push_back(sym.sentinel);
  std::string s;
  for (const ir::DimTerms& t : k.runtime_extents) {
    s += (s.empty() ? "" : ", ") + ir::dim_str(t.value(sentinels), symbols);
  }
  return s;
}

}  // namespace

DynamicDims::Entry& DynamicDims::entry(uint64_t hash) {
  auto it = entries_.find(hash);
  if (it == entries_.end()) {
    if (entries_.size() >= capacity_) {
      entries_.erase(std::min_element(entries_.begin(), entries_.end(), [](auto& x, auto& y) {
        return x.second.used < y.second.used;
      }));
    }
    it = entries_.emplace(hash, Entry{}).first;
  }
  it->second.used = ++clock_;
  return it->second;
}

std::optional<DynamicMatch> DynamicDims::match(const ir::Graph& g,
                                               const std::vector<ir::DynamicAxis>& marks,
                                               spdlog::logger& log) {
  Entry& e = entry(ir::shape_free_hash(g));
  for (const auto& sym : e.symbolic) {
    if (auto values = ir::bind(*sym, g)) return DynamicMatch{sym, std::move(*values)};
  }
  std::vector<ir::DynamicAxis> axes = marks;
  if (axes.empty() && e.last && *e.last != g) axes = ir::differing_axes(*e.last, g);
  if (axes.empty()) {
    e.last = g;
    return std::nullopt;
  }
  std::string why;
  std::optional<ir::SymbolicGraph> sym = ir::generalize(g, axes, &why);
  if (!sym) {
    log.debug("dynamic dims: the trace stays static: {}", why);
    e.last = g;
    return std::nullopt;
  }
  auto shared = std::make_shared<const ir::SymbolicGraph>(std::move(*sym));
  std::optional<ir::Bindings> values = ir::bind(*shared, g);
  if (!values) throw InternalError("dynamic dims: a generalized trace does not bind to its trace");
  std::string names;
  for (const ir::Symbol& s : shared->symbols) names += (names.empty() ? "" : ", ") + s.name;
  log.info("dynamic dims {}: one plan serves this trace at every size", names);
  e.symbolic.push_back(shared);
  return DynamicMatch{std::move(shared), std::move(*values)};
}

namespace {

// The plan of a symbolic trace, its reasons printing shapes by their symbols (B, not its
// sentinel), with a slot per region for its kernels and reasons, and each region's outer
// exponents.
DynamicPlan symbolic_plan(const ir::SymbolicGraph& trace, fusion::PlanOptions options) {
  options.sweeps = false;  // a dynamic kernel's sweeps all follow its one outer extent
  DynamicPlan dp{.plan = fusion::make_plan(trace.graph, options),
                 .symbols = trace.symbols,
                 .kernels = {},
                 .outer_exponents = {}};
  for (fusion::Decision& d : dp.plan.decisions) d.reason = ir::symbolize(d.reason, dp.symbols);
  for (fusion::Region& r : dp.plan.regions) {
    for (std::string& why : r.epilogue.refusals) why = ir::symbolize(why, dp.symbols);
  }
  const size_t n = dp.plan.regions.size();
  dp.kernels.resize(n);
  dp.reasons.resize(n);
  dp.aligned.resize(n);
  dp.paths.resize(n);
  for (const fusion::Region& r : dp.plan.regions) {
    dp.outer_exponents.push_back(region_exponents(dp.plan, r, dp.symbols));
  }
  return dp;
}

// Generation values and the plan instantiated at them, made when first needed.
struct Instances {
  ir::Bindings at;
  std::optional<fusion::Plan> plan;
};

// Kernels are generated where every node stays under 2^31 elements (32-bit indexing past
// 2^30 elements is 64-bit index arithmetic: they serve the most sizes), and a region refused
// there is tried again where every node stays at or under 2^30 elements (32-bit index
// arithmetic, which fast division by runtime extents needs).
// Aligned variants are generated with some symbols at kAlignedSizes times such primes (those
// symbols multiples of it, as the sizes they serve), under the same limits. (Dividing every
// symbol's ceiling by the alignment instead left the scores softmax's variant a largest outer
// extent B*S*S of 61 M, and B=1 S=8192 ran the kernel of scalars.)
std::vector<Instances> instances_at(const DynamicPlan& dp, const std::vector<int64_t>& alignment) {
  std::vector<Instances> tries;
  for (double limit : {2147483647.0, static_cast<double>(templates::kNarrowIndexLimit)}) {
    const int64_t ceiling = generation_ceiling(dp.plan, dp.symbols, limit, alignment);
    ir::Bindings at =
        ceiling == 0 ? ir::Bindings{} : generation_values(dp.plan, dp.symbols, ceiling);
    for (size_t k = 0; k < alignment.size() && !at.empty(); ++k) at[k] *= alignment[k];
    if (at.empty() || (!tries.empty() && tries.back().at == at)) continue;
    tries.push_back(Instances{.at = std::move(at), .plan = {}});
  }
  return tries;
}

// Makes the dynamic kernels of a plan's regions: at the instances for every size, or, for an
// aligned variant, at those of its set of aligned symbols (a bit per symbol).
class KernelMaker {
 public:
  KernelMaker(const DynamicPlan& dp, const templates::CodegenOptions& codegen)
      : dp_(dp), codegen_(codegen), tries_(instances_at(dp, {})) {}

  // No instances: the static dims leave too little room.
  bool empty() const { return tries_.empty(); }

  // Region i's kernel for every size, from the first instances that give one (where its
  // register paths are made); `why` gets each refusal.
  std::optional<templates::Kernel> kernel(size_t i, std::string* why) {
    for (Instances& at : tries_) {
      if (auto k = make(at, i, why, {}, 0)) {
        made_[i] = &at;
        return k;
      }
    }
    return std::nullopt;
  }

  // The register path `row_path` of region i's kernel for every size, or none.
  std::optional<templates::Kernel> path(size_t i, int row_path) {
    return make(*made_.at(i), i, nullptr, {}, row_path);
  }

  // The register paths region i's scheduler offers where its kernel for every size was made.
  int paths(size_t i) { return variants_at(*made_.at(i), i, {}); }

  // The most register paths region i's scheduler offers at the instances of `set`.
  int variant_paths(size_t i, uint32_t set) {
    int most = 0;
    for (Instances& at : aligned_tries_.at(set)) {
      most = std::max(most, variants_at(at, i, alignment_of(set)));
    }
    return most;
  }

  // Region i's variant with the symbols of `set` aligned (or its register path `row_path`), or
  // none.
  std::optional<templates::Kernel> variant(size_t i, uint32_t set, int row_path = 0) {
    const std::vector<int64_t> alignment = alignment_of(set);
    auto it = aligned_tries_.find(set);
    if (it == aligned_tries_.end()) {
      it = aligned_tries_.emplace(set, instances_at(dp_, alignment)).first;
    }
    for (Instances& at : it->second) {
      if (auto k = make(at, i, nullptr, alignment, row_path)) return k;
    }
    return std::nullopt;
  }

 private:
  std::vector<int64_t> alignment_of(uint32_t set) const {
    std::vector<int64_t> alignment(dp_.symbols.size(), 1);
    for (size_t k = 0; k < alignment.size(); ++k) {
      if ((set >> k) & 1U) alignment[k] = kAlignedSizes;
    }
    return alignment;
  }

  const fusion::Plan& instantiate(Instances& at) const {
    if (!at.plan) at.plan = fusion::instantiate_plan(dp_.plan, dp_.symbols, at.at);
    return *at.plan;
  }

  // Region i's dynamic kernel at the generation values `at`, or none and why.
  std::optional<templates::Kernel> make(Instances& at, size_t i, std::string* why,
                                        std::vector<int64_t> alignment, int row_path) {
    const fusion::Plan& plan = instantiate(at);
    return templates::generate_dynamic(
        plan.graph, plan.regions[i],
        dynamic_sizes(dp_.outer_exponents[i], at.at, std::move(alignment), row_path), codegen_,
        why);
  }

  int variants_at(Instances& at, size_t i, std::vector<int64_t> alignment) {
    const fusion::Plan& plan = instantiate(at);
    return templates::dynamic_variants(
        plan.graph, plan.regions[i],
        dynamic_sizes(dp_.outer_exponents[i], at.at, std::move(alignment), 0), codegen_);
  }

  const DynamicPlan& dp_;
  const templates::CodegenOptions& codegen_;
  std::vector<Instances> tries_;
  std::unordered_map<uint32_t, std::vector<Instances>> aligned_tries_;
  std::unordered_map<size_t, Instances*> made_;  // per region: where its kernel was made
};

// The symbols of the region, a bit each (none for a trace with more than 32).
uint32_t region_symbols(const DynamicPlan& dp, size_t i) {
  const std::vector<int>& e = dp.outer_exponents[i];
  uint32_t set = 0;
  for (size_t k = 0; k < e.size() && dp.symbols.size() <= 32; ++k) {
    if (e[k] > 0) set |= 1U << k;
  }
  return set;
}

// The symbols a kernel was generated aligned for, a bit each.
uint32_t aligned_symbols(const templates::Kernel& k) {
  uint32_t set = 0;
  for (size_t j = 0; j < k.alignment.size(); ++j) {
    if (k.alignment[j] != 1) set |= 1U << j;
  }
  return set;
}

// The variant of region i (whose kernel for every size is `kernel`) with every symbol of the
// region aligned; then the same source with fewer of them aligned (a softmax over [B,H,S,S]
// needs S a multiple of 8, not B), which serves more sizes. A variant is worth its compile only
// where alignment changed the kernel: the same source as the kernel for every size, or one that
// differs by its index width alone (the aligned values are larger), is dropped.
std::optional<templates::Kernel> aligned_variant(KernelMaker& maker, const DynamicPlan& dp,
                                                 size_t i, const templates::Kernel& kernel) {
  const uint32_t in_region = region_symbols(dp, i);
  if (in_region == 0) return std::nullopt;
  std::optional<templates::Kernel> all = maker.variant(i, in_region);
  if (all && (all->source == kernel.source || all->max_elements != kernel.max_elements)) {
    all.reset();
  }
  // Proper subsets, fewest symbols first (at most 2^4 of them tried).
  std::vector<uint32_t> subsets;
  if (all && std::popcount(in_region) <= 4) {
    for (uint32_t set = (in_region - 1) & in_region; set != 0; set = (set - 1) & in_region) {
      subsets.push_back(set);
    }
    std::stable_sort(subsets.begin(), subsets.end(),
                     [](uint32_t x, uint32_t y) { return std::popcount(x) < std::popcount(y); });
  }
  for (uint32_t set : subsets) {
    std::optional<templates::Kernel> fewer = maker.variant(i, set);
    if (fewer && fewer->source == all->source && fewer->max_elements == all->max_elements) {
      return fewer;
    }
  }
  return all;
}

// The register paths of a multi-pass row kernel whose length is given at launch, made where
// `make(k)` made its kernel: paths 1, 2, ... of the `count(void)` its scheduler offers
// (templates::dynamic_variants), until one is refused.
template <class Count, class Make>
void add_paths(DynamicPlan& dp, size_t i, const templates::Kernel& of, const Count& count,
               const Make& make) {
  const fusion::RegionKind kind = dp.plan.regions[i].kind;
  if (of.runtime_extents.empty() ||
      (kind != fusion::RegionKind::reduction && kind != fusion::RegionKind::normalization)) {
    return;
  }
  const int paths = count();
  for (int path = 1; path <= paths; ++path) {
    std::optional<templates::Kernel> k = make(path);
    if (!k) break;
    dp.paths[i].push_back(std::move(*k));
  }
}

// What fusejit plan says of region i's dynamic kernels: its runtime extents, its aligned
// variant, its register paths (after a refusal's reason, if it has one).
void add_reasons(DynamicPlan& dp, size_t i) {
  std::string& reason = dp.reasons[i];
  if (dp.kernels[i] && !dp.kernels[i]->runtime_extents.empty()) {
    reason = fmt::format("runtime extents {}, divided by fast division",
                         extents_text(*dp.kernels[i], dp.symbols));
  }
  if (dp.aligned[i]) {
    std::string names;
    for (size_t k = 0; k < dp.aligned[i]->alignment.size(); ++k) {
      if (dp.aligned[i]->alignment[k] == 1) continue;
      names += (names.empty() ? "" : ", ") + dp.symbols[k].name;
    }
    reason += fmt::format(
        "{}a variant for sizes where {} {} of {}", reason.empty() ? "" : "; ", names,
        names.find(',') == std::string::npos ? "is a multiple" : "are multiples", kAlignedSizes);
  }
  if (!dp.paths[i].empty()) {
    std::string bounds;
    for (const templates::Kernel& k : dp.paths[i]) {
      bounds += fmt::format("{}{}", bounds.empty() ? "" : ", ", k.max_row_length);
    }
    reason += fmt::format("; register paths for rows of at most {} elements", bounds);
  }
}

// Region i's dynamic kernels: for every size, its aligned variant, their register paths.
void plan_region(DynamicPlan& dp, KernelMaker& maker, size_t i) {
  dp.kernels[i] = maker.kernel(i, &dp.reasons[i]);
  if (dp.kernels[i]) dp.aligned[i] = aligned_variant(maker, dp, i, *dp.kernels[i]);
  if (dp.aligned[i]) {
    const uint32_t set = aligned_symbols(*dp.aligned[i]);
    add_paths(
        dp, i, *dp.aligned[i], [&] { return maker.variant_paths(i, set); },
        [&](int path) { return maker.variant(i, set, path); });
  }
  if (dp.kernels[i]) {
    add_paths(
        dp, i, *dp.kernels[i], [&] { return maker.paths(i); },
        [&](int path) { return maker.path(i, path); });
  }
  add_reasons(dp, i);
}

}  // namespace

DynamicPlan plan_dynamic(const ir::SymbolicGraph& trace, const fusion::PlanOptions& plan_options,
                         const templates::CodegenOptions& codegen) {
  DynamicPlan dp = symbolic_plan(trace, plan_options);
  KernelMaker maker(dp, codegen);
  if (maker.empty()) {
    dp.reasons.assign(dp.plan.regions.size(),
                      "the static dims leave too little room under 32-bit indexing");
    return dp;
  }
  for (size_t i = 0; i < dp.plan.regions.size(); ++i) {
    const std::vector<int>& e = dp.outer_exponents[i];
    const bool symbolic = std::any_of(e.begin(), e.end(), [](int x) { return x > 0; });
    if (dp.plan.regions[i].kind == fusion::RegionKind::gemm || !symbolic) continue;
    plan_region(dp, maker, i);
  }
  return dp;
}

int64_t outer_extent(const DynamicPlan& plan, size_t region, const ir::Bindings& values) {
  return power_product(plan.outer_exponents.at(region), values);
}

namespace {

// Whether the dynamic kernel `k` of region `region` serves `values`: its outer extent, its
// 32-bit index range, the range of its fast divisions, its alignment, and for a register
// path, its row lengths.
bool serves(const templates::Kernel& k, const DynamicPlan& plan, size_t region,
            const ir::Bindings& values) {
  if (outer_extent(plan, region, values) > k.max_outer) return false;
  if (k.max_elements > 0 && !region_fits(plan, region, values, k.max_elements)) return false;
  for (const ir::DimTerms& t : k.runtime_extents) {
    if (t.value(values) > templates::kFastDivMaxDivisor) return false;
  }
  for (const ir::DimTerms& t : k.dividend_bounds) {
    if (t.value(values) > templates::kFastDivMaxDividend + 1) return false;
  }
  for (size_t s = 0; s < k.alignment.size(); ++s) {
    if (values.at(s) % k.alignment[s] != 0) return false;
  }
  if (k.max_row_length == 0) return true;
  const int64_t length = k.row_length.value(values);
  return length >= k.min_row_length && length <= k.max_row_length;
}

}  // namespace

const templates::Kernel* dynamic_kernel_at(const DynamicPlan& plan, size_t region,
                                           const ir::Bindings& values) {
  if (region < plan.paths.size()) {
    for (const templates::Kernel& k : plan.paths[region]) {
      if (serves(k, plan, region, values)) return &k;
    }
  }
  for (const auto* variants : {&plan.aligned, &plan.kernels}) {
    if (region < variants->size() && (*variants)[region] &&
        serves(*(*variants)[region], plan, region, values)) {
      return &*(*variants)[region];
    }
  }
  return nullptr;
}

bool runs_dynamic(const DynamicPlan& plan, size_t region, const ir::Bindings& values) {
  return dynamic_kernel_at(plan, region, values) != nullptr;
}

std::vector<uint64_t> runtime_arguments(const templates::Kernel& k, const ir::Bindings& values) {
  std::vector<uint64_t> args;
  for (const ir::DimTerms& t : k.runtime_extents) {
    const int64_t extent = t.value(values);
    args.push_back(static_cast<uint64_t>(extent));
    args.push_back(templates::fast_divisor(extent).packed());
  }
  return args;
}

std::vector<templates::Kernel> kernels_at(const DynamicPlan& plan, const ir::Bindings& values,
                                          const templates::CodegenOptions& codegen) {
  std::vector<templates::Kernel> out;
  std::optional<fusion::Plan> at;
  for (size_t i = 0; i < plan.plan.regions.size(); ++i) {
    if (plan.plan.regions[i].kind == fusion::RegionKind::gemm) continue;
    if (runs_dynamic(plan, i, values)) {
      if (plan.kernels[i]) out.push_back(*plan.kernels[i]);
      if (i < plan.aligned.size() && plan.aligned[i]) out.push_back(*plan.aligned[i]);
      if (i < plan.paths.size()) out.insert(out.end(), plan.paths[i].begin(), plan.paths[i].end());
      continue;
    }
    if (!at) at = fusion::instantiate_plan(plan.plan, plan.symbols, values);
    out.push_back(templates::generate(at->graph, at->regions[i], codegen));
  }
  return out;
}

DynamicExecutable::DynamicExecutable(DynamicPlan p)
    : plan(std::move(p)),
      kernels(plan.kernels.size()),
      aligned(plan.kernels.size()),
      paths(plan.paths.size()) {
  for (size_t i = 0; i < plan.paths.size(); ++i) paths[i].resize(plan.paths[i].size());
}

namespace {

// The slot of `k`, one of region `region`'s dynamic kernels (dynamic_kernel_at).
std::shared_ptr<LoadedKernel>& slot_of(DynamicExecutable& dyn, size_t region,
                                       const templates::Kernel* k) {
  const DynamicPlan& plan = dyn.plan;
  if (region < plan.paths.size()) {
    const std::vector<templates::Kernel>& paths = plan.paths[region];
    if (k >= paths.data() && k < paths.data() + paths.size()) {
      return dyn.paths[region][static_cast<size_t>(k - paths.data())];
    }
  }
  if (region < plan.aligned.size() && plan.aligned[region] && k == &*plan.aligned[region]) {
    return dyn.aligned[region];
  }
  return dyn.kernels[region];
}

}  // namespace

Executable instantiate_executable(DynamicExecutable& dyn, const ir::Bindings& values,
                                  const KernelLoader& loader, const BuildOptions& options) {
  // Which dynamic kernel each region launches and its slot; those not loaded yet, in one load.
  const size_t regions = dyn.plan.plan.regions.size();
  std::vector<const templates::Kernel*> launched(regions, nullptr);
  std::vector<std::shared_ptr<LoadedKernel>*> slots(regions, nullptr);
  std::vector<templates::Kernel> missing;
  std::vector<std::shared_ptr<LoadedKernel>*> missing_slots;
  for (size_t i = 0; i < regions; ++i) {
    launched[i] = dynamic_kernel_at(dyn.plan, i, values);
    if (launched[i] == nullptr) continue;
    slots[i] = &slot_of(dyn, i, launched[i]);
    if (*slots[i]) continue;
    missing.push_back(*launched[i]);
    missing_slots.push_back(slots[i]);
  }
  if (!missing.empty()) {
    std::vector<std::shared_ptr<LoadedKernel>> loaded =
        load_kernels(missing, loader, options.compile_threads);
    for (size_t j = 0; j < missing_slots.size(); ++j) *missing_slots[j] = std::move(loaded[j]);
  }
  return build_executable(fusion::instantiate_plan(dyn.plan.plan, dyn.plan.symbols, values),
                          loader, options, [&](size_t region, Step& step) {
                            const templates::Kernel* k = launched[region];
                            if (k == nullptr) return false;
                            step.kernel = *slots[region];
                            step.arguments = k->params;
                            step.outer = outer_extent(dyn.plan, region, values);
                            if (k->max_row_length > 0) {
                              step.row_length = k->row_length.value(values);
                            }
                            step.runtime_extents = runtime_arguments(*k, values);
                            return true;
                          });
}

}  // namespace fusejit::jit
