// jit/check: see check.h.
#include "jit/check.h"

#include <cmath>
#include <limits>
#include <random>
#include <algorithm>
#include <cstring>
#include <thread>

#include "fusejit/error.h"

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

// Row-axis labels for slice_rows: each node either carries the row axis as its axis 0 (Row),
// does not (Free: broadcast or unrelated), or has not been reached (Unknown).
enum class Label : uint8_t { unknown, row, free };

}  // namespace

std::optional<RowSlice> slice_rows(const ir::Graph& g, int64_t count) {
  if (g.outputs().empty()) return std::nullopt;
  const int64_t m = g.node(g.outputs()[0]).shape.empty() ? 0 : g.node(g.outputs()[0]).shape[0];
  if (m < 2 || count >= m) return std::nullopt;
  std::vector<Label> label(g.size(), Label::unknown);
  bool ok = true;
  auto mark = [&](ir::NodeId id, Label l) {
    Label& cur = label[static_cast<size_t>(id)];
    if (cur == Label::unknown) cur = l;
    else if (cur != l) ok = false;  // needed both with and without the row axis
  };
  for (ir::NodeId id : g.outputs()) {
    const ir::Node& n = g.node(id);
    if (n.shape.empty() || n.shape[0] != m) return std::nullopt;
    mark(id, Label::row);
  }
  // Operands before users: walk backwards, pushing each node's label to its operands.
  for (size_t i = g.size(); i-- > 0 && ok;) {
    const ir::Node& n = g.node(static_cast<ir::NodeId>(i));
    const Label l = label[i];
    if (l == Label::unknown) continue;
    const size_t rank = n.shape.size();
    for (size_t k = 0; k < n.inputs.size() && ok; ++k) {
      const ir::NodeId in = n.inputs[k];
      const ir::Node& op = g.node(in);
      if (l == Label::free) {
        mark(in, Label::free);
        continue;
      }
      switch (ir::op_kind(n.op)) {
        case ir::OpKind::reduce:
          if (n.axes.front() == 0) ok = false;  // the row axis itself is reduced
          else mark(in, Label::row);
          break;
        case ir::OpKind::view:
          if (n.op == ir::Op::permute) {
            if (n.axes[0] != 0) ok = false;
            else mark(in, Label::row);
          } else if (n.op == ir::Op::expand) {
            const bool carries = op.shape.size() == rank && op.shape[0] == m;
            mark(in, carries ? Label::row : Label::free);
          } else {  // reshape: only when axis 0 is kept whole
            if (op.shape.empty() || op.shape[0] != m) ok = false;
            else mark(in, Label::row);
          }
          break;
        case ir::OpKind::matmul:
          if (rank != 2) ok = false;  // batched: axis 0 is a batch axis of both operands
          else mark(in, k == 0 ? Label::row : Label::free);
          break;
        default: {  // elementwise, with broadcasting from the right
          const bool carries = op.shape.size() == rank && op.shape[0] == m;
          mark(in, carries ? Label::row : Label::free);
        }
      }
    }
  }
  if (!ok) return std::nullopt;

  RowSlice slice;
  for (int64_t r = 0; r < count; ++r) slice.rows.push_back(r * (m - 1) / (count - 1));
  slice.rows.erase(std::unique(slice.rows.begin(), slice.rows.end()), slice.rows.end());
  const int64_t k = static_cast<int64_t>(slice.rows.size());
  // Dead nodes are dropped (they may not survive the cut); inputs are all kept, in order.
  std::vector<ir::NodeId> remap(g.size(), -1);
  for (size_t i = 0; i < g.size(); ++i) {
    const ir::Node& n = g.node(static_cast<ir::NodeId>(i));
    if (label[i] == Label::unknown && n.op != ir::Op::input) continue;
    ir::NodeSpec spec = ir::spec_of(n);
    for (ir::NodeId& in : spec.inputs) in = remap[static_cast<size_t>(in)];
    if (label[i] == Label::row && (n.op == ir::Op::input || n.op == ir::Op::reshape ||
                                   n.op == ir::Op::expand)) {
      spec.shape[0] = k;
    }
    if (n.op == ir::Op::input) slice.input_sliced.push_back(label[i] == Label::row);
    try {
      remap[i] = slice.graph.add(spec);
    } catch (const Error&) {
      return std::nullopt;  // the labels were not enough to keep the slice well-formed
    }
  }
  std::vector<ir::NodeId> outs;
  for (ir::NodeId id : g.outputs()) outs.push_back(remap[static_cast<size_t>(id)]);
  slice.graph.set_outputs(outs);
  return slice;
}

ir::HostTensor take_rows(const ir::HostTensor& t, const std::vector<int64_t>& rows) {
  Shape shape = t.shape;
  const int64_t row_elems = t.numel() / shape[0];
  shape[0] = static_cast<int64_t>(rows.size());
  ir::HostTensor out(t.dtype, shape);
  const size_t row_bytes = static_cast<size_t>(row_elems) * static_cast<size_t>(dtype_size(t.dtype));
  for (size_t r = 0; r < rows.size(); ++r) {
    std::memcpy(out.bytes.data() + r * row_bytes,
                t.bytes.data() + static_cast<size_t>(rows[r]) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace fusejit::jit
