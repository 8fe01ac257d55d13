// jit/check: see check.h.
#include "jit/check.h"

#include <cmath>
#include <limits>
#include <random>

#include "ir/shape.h"

namespace fusejit::jit {

std::vector<ir::HostTensor> random_inputs(const ir::Graph& g, uint64_t seed) {
  std::vector<ir::HostTensor> inputs;
  std::mt19937_64 rng(seed);
  for (ir::NodeId id : g.inputs()) {
    const ir::Node& n = g.node(id);
    ir::HostTensor t(n.dtype, n.shape);
    const int64_t count = t.numel();
    if (is_floating(n.dtype)) {
      std::normal_distribution<double> dist(0.0, 1.0);
      for (int64_t i = 0; i < count; ++i) t.set(i, dist(rng));
    } else if (is_integral(n.dtype)) {
      std::uniform_int_distribution<int> dist(-8, 8);
      for (int64_t i = 0; i < count; ++i) t.set(i, dist(rng));
    } else {
      std::bernoulli_distribution dist(0.5);
      for (int64_t i = 0; i < count; ++i) t.set(i, dist(rng) ? 1.0 : 0.0);
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

double error_bound(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes()) {
    if (n.dtype == DType::f16 || n.dtype == DType::bf16) return 1e-2;
  }
  return 1e-5;
}

double relative_error(const ir::HostTensor& out, const ir::HostTensor& ref) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (out.dtype != ref.dtype || out.shape != ref.shape) return kInf;
  double diff = 0.0, norm_ref = 0.0, norm_out = 0.0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double o = out.get(i), r = ref.get(i);
    if (std::isnan(r)) {
      if (!std::isnan(o)) return kInf;
      continue;  // both NaN: the reference itself is NaN there
    }
    if (std::isnan(o)) return kInf;
    if (std::isinf(r) || std::isinf(o)) {
      if (o != r) return kInf;
      continue;
    }
    diff += (o - r) * (o - r);
    norm_ref += r * r;
    norm_out += o * o;
  }
  if (norm_ref == 0.0) return std::sqrt(norm_out);
  return std::sqrt(diff / norm_ref);
}

}  // namespace fusejit::jit
