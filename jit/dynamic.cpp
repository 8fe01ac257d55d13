// jit/dynamic: see dynamic.h.
#include "jit/dynamic.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/hash.h"
#include "jit/gemm_call.h"

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

// The symbols' value when a dynamic kernel is generated: odd (so that the divisibility of an
// extent by a power of two, which decides vector widths, is that of its static part), as large
// as keeps every node of the plan under 2^31 elements (so kernels index with 32 bits and serve
// every size up to it), at most 2^15. 0 when that leaves too little room to be worth a kernel.
int64_t generation_value(const fusion::Plan& plan, const std::vector<ir::Symbol>& symbols) {
  constexpr double kLimit = 2147483647.0;
  double v = 32767;
  for (const ir::Node& n : plan.graph.nodes()) {
    const ir::DimTerms t = numel_terms(n.shape, symbols);
    int degree = 0;
    for (int e : t.exponents) degree += e;
    if (degree == 0) continue;
    v = std::min(v, std::floor(std::pow(kLimit / static_cast<double>(t.coefficient),
                                        1.0 / degree)));
  }
  auto value = static_cast<int64_t>(v);
  if (value % 2 == 0) --value;
  return value >= 9 ? value : 0;
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

// The dynamic kernel of one region, or none and why; `a` and `b` are the plan at two generation
// values.
std::optional<templates::Kernel> dynamic_kernel(const fusion::Plan& a, const fusion::Plan& b,
                                                size_t region, int64_t outer_a, int64_t outer_b,
                                                const templates::CodegenOptions& codegen,
                                                std::string* why) {
  return templates::generate_dynamic(a.graph, b.graph, a.regions[region], outer_a, outer_b,
                                     codegen, why);
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

DynamicPlan plan_dynamic(const ir::SymbolicGraph& trace, const fusion::PlanOptions& plan_options,
                         const templates::CodegenOptions& codegen) {
  DynamicPlan dp{.plan = fusion::make_plan(trace.graph, plan_options),
                 .symbols = trace.symbols,
                 .kernels = {},
                 .outer_exponents = {}};
  // Reasons print shapes: say B, not its sentinel.
  for (fusion::Decision& d : dp.plan.decisions) d.reason = ir::symbolize(d.reason, dp.symbols);
  for (fusion::Region& r : dp.plan.regions) {
    for (std::string& why : r.epilogue.refusals) why = ir::symbolize(why, dp.symbols);
  }
  const size_t n = dp.plan.regions.size();
  dp.kernels.resize(n);
  dp.reasons.resize(n);
  for (const fusion::Region& r : dp.plan.regions) {
    dp.outer_exponents.push_back(region_exponents(dp.plan, r, dp.symbols));
  }
  const int64_t va = generation_value(dp.plan, dp.symbols);
  if (va == 0) {
    dp.reasons.assign(n, "the static dims leave too little room under 32-bit indexing");
    return dp;
  }
  const ir::Bindings at_a(dp.symbols.size(), va), at_b(dp.symbols.size(), va - 2);
  const fusion::Plan a = fusion::instantiate_plan(dp.plan, dp.symbols, at_a);
  const fusion::Plan b = fusion::instantiate_plan(dp.plan, dp.symbols, at_b);
  for (size_t i = 0; i < n; ++i) {
    const std::vector<int>& e = dp.outer_exponents[i];
    const bool symbolic = std::any_of(e.begin(), e.end(), [](int x) { return x > 0; });
    if (dp.plan.regions[i].kind == fusion::RegionKind::gemm || !symbolic) continue;
    dp.kernels[i] = dynamic_kernel(a, b, i, power_product(e, at_a), power_product(e, at_b),
                                   codegen, &dp.reasons[i]);
  }
  return dp;
}

int64_t outer_extent(const DynamicPlan& plan, size_t region, const ir::Bindings& values) {
  return power_product(plan.outer_exponents.at(region), values);
}

bool runs_dynamic(const DynamicPlan& plan, size_t region, const ir::Bindings& values) {
  const auto& k = plan.kernels.at(region);
  return k && outer_extent(plan, region, values) <= k->max_outer;
}

std::vector<templates::Kernel> kernels_at(const DynamicPlan& plan, const ir::Bindings& values,
                                          const templates::CodegenOptions& codegen) {
  std::vector<templates::Kernel> out;
  std::optional<fusion::Plan> at;
  for (size_t i = 0; i < plan.plan.regions.size(); ++i) {
    if (plan.plan.regions[i].kind == fusion::RegionKind::gemm) continue;
    if (runs_dynamic(plan, i, values)) {
      out.push_back(*plan.kernels[i]);
      continue;
    }
    if (!at) at = fusion::instantiate_plan(plan.plan, plan.symbols, values);
    out.push_back(templates::generate(at->graph, at->regions[i], codegen));
  }
  return out;
}

DynamicExecutable load_dynamic(DynamicPlan plan, const KernelLoader& loader, int threads) {
  std::vector<templates::Kernel> kernels;  // an unnamed kernel: none for that region
  for (const auto& k : plan.kernels) kernels.push_back(k ? *k : templates::Kernel{});
  return DynamicExecutable{.plan = std::move(plan),
                           .kernels = load_kernels(kernels, loader, threads)};
}

Executable instantiate_executable(const DynamicExecutable& dyn, const ir::Bindings& values,
                                  const KernelLoader& loader, const BuildOptions& options) {
  return build_executable(fusion::instantiate_plan(dyn.plan.plan, dyn.plan.symbols, values),
                          loader, options, [&](size_t region, Step& step) {
                            if (!runs_dynamic(dyn.plan, region, values)) return false;
                            step.kernel = dyn.kernels[region];
                            step.outer = outer_extent(dyn.plan, region, values);
                            return true;
                          });
}

}  // namespace fusejit::jit
