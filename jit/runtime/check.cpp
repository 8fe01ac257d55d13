// jit/check: see check.h.
#include "jit/runtime/check.h"

#include <cmath>
#include <limits>
#include <random>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "fusejit/error.h"

#include "ir/interp.h"
#include "ir/rebuild.h"
#include "ir/shape.h"

namespace fusejit::jit {

namespace {

// Fills t[begin, end) from a generator seeded by (seed, chunk): each chunk of elements has its
// own stream, so the values do not depend on how many threads fill them.
void fill_chunk(ir::HostTensor& t, uint64_t seed, int64_t begin, int64_t end) {
  std::mt19937_64 rng(seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(begin + 1)));
  if (is_floating(t.dtype)) {
    std::normal_distribution<double> dist(0.0, 1.0);
    for (int64_t i = begin; i < end; ++i) t.set(i, dist(rng));
  } else if (is_integral(t.dtype)) {
    std::uniform_int_distribution<int> dist(-8, 8);
    for (int64_t i = begin; i < end; ++i) t.set(i, dist(rng));
  } else {
    std::bernoulli_distribution dist(0.5);
    for (int64_t i = begin; i < end; ++i) t.set(i, dist(rng) ? 1.0 : 0.0);
  }
}

}  // namespace

std::vector<ir::HostTensor> random_inputs(const ir::Graph& g, uint64_t seed) {
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<ir::HostTensor> inputs;
  uint64_t input_seed = seed;
  for (ir::NodeId id : g.inputs()) {
    const ir::Node& n = g.node(id);
    ir::HostTensor t(n.dtype, n.shape);
    const int64_t count = t.numel();
    const int64_t chunks = (count + kChunk - 1) / kChunk;
    const int64_t threads = std::min<int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (int64_t w = 0; w < threads; ++w) {
      pool.emplace_back([&, w] {
        for (int64_t c = w; c < chunks; c += threads) {
          fill_chunk(t, input_seed, c * kChunk, std::min(count, (c + 1) * kChunk));
        }
      });
    }
    for (auto& th : pool) th.join();
    inputs.push_back(std::move(t));
    input_seed = input_seed * 6364136223846793005ull + 1442695040888963407ull;
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

namespace {

// Which axis of a node carries the sampled axis: one of its axes (>= 0), none (kFree: the node
// is broadcast along it or does not depend on it), or not reached yet (kUnknown).
constexpr int64_t kUnknown = -2;
constexpr int64_t kFree = -1;

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// The operand axis that axis `axis` of a result of rank `rank` reads when the operand is
// broadcast to it (aligned from the right), or kFree when the operand is broadcast along it.
int64_t broadcast_axis(const Shape& operand, size_t rank, int64_t axis, int64_t m) {
  const int64_t k = axis - static_cast<int64_t>(rank - operand.size());
  return k >= 0 && operand[static_cast<size_t>(k)] == m ? k : kFree;
}

// The operand axis of `n`'s operand `k` that carries `n`'s axis `axis` (of extent m), kFree, or
// nullopt when the operand needs the axis mixed with others (reduced, contracted, reshaped away).
std::optional<int64_t> operand_axis(const ir::Node& n, size_t k, const ir::Node& operand,
                                    int64_t axis, int64_t m) {
  const size_t rank = n.shape.size();
  switch (ir::op_kind(n.op)) {
    case ir::OpKind::reduce: {
      // n.axes are the operand's reduced axes, ascending; without keepdim they are gone from n.
      int64_t a = axis;
      if (!n.keepdim) {
        for (int64_t r : n.axes) a += r <= a ? 1 : 0;
      }
      if (std::binary_search(n.axes.begin(), n.axes.end(), a)) return std::nullopt;
      return a;
    }
    case ir::OpKind::view:
      if (n.op == ir::Op::permute) return n.axes[static_cast<size_t>(axis)];
      // slice and concat keep every axis but their own, which mixes (offsets, operand ranges).
      if (n.op == ir::Op::slice || n.op == ir::Op::concat) {
        if (axis == n.axes[0]) return std::nullopt;
        return axis;
      }
      if (n.op == ir::Op::expand) return broadcast_axis(operand.shape, rank, axis, m);
      // reshape: the axis survives whole when the operand has an axis of the same extent with
      // the same number of elements before it (then the same number after it too).
      for (size_t j = 0; j < operand.shape.size(); ++j) {
        if (operand.shape[j] == m &&
            product(operand.shape, 0, j) == product(n.shape, 0, static_cast<size_t>(axis))) {
          return static_cast<int64_t>(j);
        }
      }
      return std::nullopt;
    case ir::OpKind::matmul: {
      const size_t r = operand.shape.size();
      if (axis == static_cast<int64_t>(rank) - 2) {  // M: rows of the left operand
        return k == 0 ? static_cast<int64_t>(r) - 2 : kFree;
      }
      if (axis == static_cast<int64_t>(rank) - 1) {  // N: columns of the right operand
        return k == 1 ? static_cast<int64_t>(r) - 1 : kFree;
      }
      // A batch axis: each operand carries it unless broadcast along it.
      const Shape batch(operand.shape.begin(), operand.shape.end() - 2);
      return broadcast_axis(batch, rank - 2, axis, m);
    }
    case ir::OpKind::gather:
      // Both operands carry the axis in place, except the data along the gathered axis (the
      // index reads anywhere in it) or where the index is shorter than the data.
      if (k == 0 && (axis == n.axes[0] || operand.shape[static_cast<size_t>(axis)] != m)) {
        return std::nullopt;
      }
      return axis;
    case ir::OpKind::update:
      // dst and the value carry every axis but the update's in place; the start is one number.
      if (k == 2) return kFree;
      if (axis == n.axes[0]) return std::nullopt;
      return axis;
    default:  // elementwise, broadcasting from the right
      return broadcast_axis(operand.shape, rank, axis, m);
  }
}

// Labels every node with the axis that carries the outputs' axis `axis` (kUnknown: not needed),
// or nullopt when some node needs it mixed, or needs it along two different axes.
std::optional<std::vector<int64_t>> label_axis(const ir::Graph& g, int64_t axis, int64_t m) {
  std::vector<int64_t> label(g.size(), kUnknown);
  bool ok = true;
  auto mark = [&](ir::NodeId id, int64_t l) {
    int64_t& cur = label[static_cast<size_t>(id)];
    if (cur == kUnknown) cur = l;
    else if (cur != l) ok = false;
  };
  for (ir::NodeId id : g.outputs()) mark(id, axis);
  // Users before operands: walk backwards, pushing each node's label to its operands.
  for (size_t i = g.size(); i-- > 0 && ok;) {
    const ir::Node& n = g.node(static_cast<ir::NodeId>(i));
    const int64_t l = label[i];
    if (l == kUnknown) continue;
    // A random draw's and an arange's values follow the element's position in the whole shape:
    // the sampled rows would not have them, so no cut.
    if (l >= 0 && (ir::op_kind(n.op) == ir::OpKind::random || n.op == ir::Op::arange)) ok = false;
    for (size_t k = 0; k < n.inputs.size() && ok; ++k) {
      const ir::NodeId in = n.inputs[k];
      if (l == kFree) {
        mark(in, kFree);
        continue;
      }
      const std::optional<int64_t> a = operand_axis(n, k, g.node(in), l, m);
      if (a) mark(in, *a);
      else ok = false;
    }
  }
  if (!ok) return std::nullopt;
  return label;
}

// The trace with the carrying axis of each input, reshape, expand and slice cut to k indices.
std::optional<ir::Graph> cut_graph(const ir::Graph& g, const std::vector<int64_t>& label,
                                   int64_t k, std::vector<int64_t>& input_axis) {
  // Dead nodes are dropped (they may not survive the cut); inputs are all kept, in order. A
  // labelled node's operands are all labelled, so no kept node uses a dropped one.
  auto step = [&](ir::NodeId id, ir::NodeSpec spec, ir::Graph& out) {
    const int64_t l = label[static_cast<size_t>(id)];
    if (l == kUnknown && spec.op != ir::Op::input) return ir::kDropped;
    const bool states_shape = spec.op == ir::Op::input || spec.op == ir::Op::reshape ||
                              spec.op == ir::Op::expand || spec.op == ir::Op::slice;
    if (l >= 0 && states_shape) {
      spec.shape[static_cast<size_t>(l)] = k;
    }
    if (spec.op == ir::Op::input) input_axis.push_back(l >= 0 ? l : -1);
    return out.add(std::move(spec));
  };
  try {
    return ir::rebuild(g, step).graph;
  } catch (const Error&) {
    return std::nullopt;  // the labels were not enough to keep the slice well-formed
  }
}

}  // namespace

std::optional<RowSlice> slice_rows(const ir::Graph& g, int64_t count) {
  if (g.outputs().empty() || count < 2) return std::nullopt;
  const Shape& first = g.node(g.outputs()[0]).shape;
  for (size_t axis = 0; axis < first.size(); ++axis) {
    const int64_t m = first[axis];
    if (m < 2 || count >= m) continue;
    bool same = true;  // every output has the axis, of the same extent
    for (ir::NodeId id : g.outputs()) {
      const Shape& s = g.node(id).shape;
      same = same && axis < s.size() && s[axis] == m;
    }
    if (!same) continue;
    const auto label = label_axis(g, static_cast<int64_t>(axis), m);
    if (!label) continue;
    RowSlice slice;
    slice.output_axis = static_cast<int64_t>(axis);
    for (int64_t r = 0; r < count; ++r) slice.rows.push_back(r * (m - 1) / (count - 1));
    slice.rows.erase(std::unique(slice.rows.begin(), slice.rows.end()), slice.rows.end());
    auto graph = cut_graph(g, *label, static_cast<int64_t>(slice.rows.size()), slice.input_axis);
    if (!graph) continue;
    slice.graph = std::move(*graph);
    return slice;
  }
  return std::nullopt;
}

ir::HostTensor take_slice(const ir::HostTensor& t, int64_t axis, const std::vector<int64_t>& rows) {
  const size_t a = static_cast<size_t>(axis);
  Shape shape = t.shape;
  const int64_t outer = product(shape, 0, a);
  const size_t inner_bytes =
      static_cast<size_t>(product(shape, a + 1, shape.size())) * static_cast<size_t>(dtype_size(t.dtype));
  const int64_t extent = shape[a];
  shape[a] = static_cast<int64_t>(rows.size());
  ir::HostTensor out(t.dtype, shape);
  std::byte* dst = out.bytes.data();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t r : rows) {
      std::memcpy(dst, t.bytes.data() + static_cast<size_t>(o * extent + r) * inner_bytes, inner_bytes);
      dst += inner_bytes;
    }
  }
  return out;
}

std::vector<ir::HostTensor> slice_inputs(const RowSlice& slice,
                                         const std::vector<ir::HostTensor>& inputs) {
  std::vector<ir::HostTensor> out;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int64_t axis = slice.input_axis[k];
    out.push_back(axis >= 0 ? take_slice(inputs[k], axis, slice.rows) : inputs[k]);
  }
  return out;
}

ir::HostTensor take_rows(const ir::HostTensor& t, const std::vector<int64_t>& rows) {
  return take_slice(t, 0, rows);
}

bool CheckReport::passed() const {
  return std::all_of(errors.begin(), errors.end(), [&](double e) { return e <= bound; });
}

CheckReport check_outputs(const ir::Graph& g, const std::vector<ir::HostTensor>& inputs,
                          std::vector<ir::HostTensor> got, int64_t sample_rows,
                          int64_t full_elements) {
  int64_t elements = 0;
  bool has_gemm = false;
  for (const ir::Node& n : g.nodes()) {
    elements = std::max(elements, ir::numel(n.shape));
    has_gemm = has_gemm || n.op == ir::Op::matmul;
  }
  std::optional<RowSlice> slice;
  if (elements > full_elements || has_gemm) slice = slice_rows(g, sample_rows);
  CheckReport report;
  std::vector<ir::HostTensor> ref;
  const auto start = std::chrono::steady_clock::now();
  if (slice) {
    ref = ir::interpret(slice->graph, slice_inputs(*slice, inputs));
    for (auto& t : got) t = take_slice(t, slice->output_axis, slice->rows);
    report.scope = fmt::format(
        "{} sampled indices of axis {} (of {})", slice->rows.size(), slice->output_axis,
        g.node(g.outputs()[0]).shape[static_cast<size_t>(slice->output_axis)]);
  } else {
    ref = ir::interpret(g, inputs);
    report.scope = "every element";
  }
  report.reference_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.bound = error_bound(g);
  for (size_t i = 0; i < got.size(); ++i) report.errors.push_back(relative_error(got[i], ref[i]));
  return report;
}

std::vector<ir::HostTensor> run_poisoned(Runtime& runtime, const Executable& exe,
                                         const ir::Graph& g,
                                         const std::vector<std::shared_ptr<DeviceBuffer>>& inputs) {
  const RunOptions poison{.poison_outputs = true};
  const auto outs = run_executable(exe, inputs, runtime.device(), runtime.blas(), poison);
  runtime.device().synchronize();
  std::vector<ir::HostTensor> got;
  for (ir::NodeId id : g.outputs()) {
    ir::HostTensor t(g.node(id).dtype, g.node(id).shape);
    runtime.download(*outs[got.size()], t);
    got.push_back(std::move(t));
  }
  return got;
}

}  // namespace fusejit::jit
