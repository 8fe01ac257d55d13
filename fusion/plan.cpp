// fusion/plan: region kind names and the counts of a plan; see plan.h.
#include "fusion/plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "fusejit/error.h"

namespace fusejit::fusion {

std::string_view region_kind_name(RegionKind kind) {
  switch (kind) {
    case RegionKind::pointwise:
      return "pointwise";
    case RegionKind::reduction:
      return "reduction";
    case RegionKind::normalization:
      return "normalization";
    case RegionKind::gemm:
      return "gemm";
    case RegionKind::attention:
      return "attention";
  }
  throw InternalError(fmt::format("region_kind_name: unknown kind {}", static_cast<int>(kind)));
}

std::string_view activation_name(GemmEpilogue::Activation activation) {
  switch (activation) {
    case GemmEpilogue::Activation::none:
      return "none";
    case GemmEpilogue::Activation::relu:
      return "relu";
    case GemmEpilogue::Activation::gelu_tanh:
      return "gelu_tanh";
  }
  throw InternalError(
      fmt::format("activation_name: unknown activation {}", static_cast<int>(activation)));
}

int Plan::kernel_count() const {
  return static_cast<int>(std::count_if(
      regions.begin(), regions.end(), [](const Region& r) { return r.kind != RegionKind::gemm; }));
}

int Plan::library_call_count() const {
  return static_cast<int>(std::count_if(
      regions.begin(), regions.end(), [](const Region& r) { return r.kind == RegionKind::gemm; }));
}

Plan instantiate_plan(const Plan& plan, const std::vector<ir::Symbol>& symbols,
                      const ir::Bindings& values) {
  auto decode = [&](Shape shape) {
    for (int64_t& d : shape) d = ir::dim_value(d, symbols, values);
    return shape;
  };
  Plan out{.graph = ir::instantiate(plan.graph, symbols, values),
           .regions = plan.regions,
           .decisions = plan.decisions};
  for (Region& r : out.regions) {
    r.shape = decode(std::move(r.shape));
    r.epilogue.batch_a = decode(std::move(r.epilogue.batch_a));
    r.epilogue.batch_b = decode(std::move(r.epilogue.batch_b));
  }
  return out;
}

}  // namespace fusejit::fusion
