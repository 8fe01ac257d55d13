// jit/gemm_call: see gemm_call.h.
#include "jit/libs/gemm_call.h"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "fusejit/error.h"

namespace fusejit::jit {

namespace {

// `batch` aligned from the right against `out`: left-padded with 1s.
Shape aligned(const Shape& batch, const Shape& out, std::string_view operand) {
  Shape s = batch;
  bool ok = s.size() <= out.size();
  s.insert(s.begin(), out.size() - std::min(out.size(), s.size()), 1);
  for (size_t d = 0; ok && d < s.size(); ++d) ok = s[d] == 1 || s[d] == out[d];
  if (!ok) {
    throw InternalError(fmt::format("gemm: {} batch dims {} do not broadcast to the output's {}",
                                    operand, ir::shape_str(batch), ir::shape_str(out)));
  }
  return s;
}

// A run of output batch dims along which each operand is either full or broadcast: one
// flattened index with one stride per buffer (that of the run's innermost dim).
struct Group {
  int64_t extent = 1;
  bool full_a = false, full_b = false;
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;
};

}  // namespace

GemmBatches split_batches(const Shape& out, const Shape& a, const Shape& b, int64_t size_a,
                          int64_t size_b, int64_t size_d) {
  const Shape pa = aligned(a, out, "A"), pb = aligned(b, out, "B");
  const std::vector<int64_t> sa = ir::contiguous_strides(pa), sb = ir::contiguous_strides(pb),
                             sd = ir::contiguous_strides(out);
  std::vector<Group> groups;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;  // no index to walk; the dims around it stay adjacent
    const bool fa = pa[d] != 1, fb = pb[d] != 1;
    if (groups.empty() || groups.back().full_a != fa || groups.back().full_b != fb) {
      groups.push_back({.extent = 1, .full_a = fa, .full_b = fb});
    }
    Group& g = groups.back();
    g.extent *= out[d];
    g.stride_a = fa ? sa[d] * size_a : 0;
    g.stride_b = fb ? sb[d] * size_b : 0;
    g.stride_d = sd[d] * size_d;
  }

  GemmBatches r;
  if (groups.empty()) {
    r.calls.push_back({});
    return r;
  }
  size_t inner = 0;  // the largest group; the later one on a tie (D's contiguous stride)
  for (size_t i = 1; i < groups.size(); ++i) {
    if (groups[i].extent >= groups[inner].extent) inner = i;
  }
  const Group& in = groups[inner];
  r.batch = in.extent;
  r.stride_a = in.stride_a;
  r.stride_b = in.stride_b;
  r.stride_d = in.stride_d;
  groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(inner));

  int64_t n_calls = 1;
  for (const Group& g : groups) n_calls *= g.extent;
  r.calls.reserve(static_cast<size_t>(n_calls));
  for (int64_t c = 0; c < n_calls; ++c) {
    GemmOffsets o;
    int64_t rest = c;
    for (size_t i = groups.size(); i-- > 0;) {  // the last group varies fastest
      const int64_t idx = rest % groups[i].extent;
      rest /= groups[i].extent;
      o.a += idx * groups[i].stride_a;
      o.b += idx * groups[i].stride_b;
      o.d += idx * groups[i].stride_d;
    }
    r.calls.push_back(o);
  }
  return r;
}

GemmCall describe_gemm_call(const fusion::Plan& plan, const fusion::Region& r, bool allow_tf32) {
  const ir::Graph& g = plan.graph;
  const ir::Node* mm = nullptr;
  for (ir::NodeId id : r.nodes) {
    if (g.node(id).op == ir::Op::matmul) mm = &g.node(id);
  }
  if (r.kind != fusion::RegionKind::gemm || !mm || r.outputs.size() != 1 || r.inputs.size() < 2) {
    throw InternalError("gemm region without exactly one matmul, its two operands and one output");
  }
  const fusion::GemmEpilogue& ep = r.epilogue;
  GemmCall call;
  call.a = r.inputs[0];  // the buffers under any folded views (fusion/plan.h)
  call.b = r.inputs[1];
  call.bias = ep.bias;
  call.residual = ep.residual;
  call.d = r.outputs[0];
  call.int8_b = ep.int8_b;
  call.scale = ep.scale;

  GemmProblem& p = call.problem;
  const Shape& a = g.node(mm->inputs[0]).shape;  // the operands as the matmul sees them
  const Shape& b = g.node(mm->inputs[1]).shape;
  p.dtype = mm->dtype;
  p.m = a[a.size() - 2];
  p.k = a.back();
  p.n = b.back();
  p.transpose_a = ep.transpose_a;
  p.transpose_b = ep.transpose_b;
  p.has_bias = ep.bias >= 0;
  p.has_residual = ep.residual >= 0;
  p.alpha = ep.alpha;
  p.beta = ep.beta;
  p.allow_tf32 = allow_tf32;
  using A = fusion::GemmEpilogue::Activation;
  p.activation = ep.activation == A::relu        ? GemmProblem::Activation::relu
                 : ep.activation == A::gelu_tanh ? GemmProblem::Activation::gelu_tanh
                                                 : GemmProblem::Activation::none;

  const Shape out_batch(mm->shape.begin(), mm->shape.end() - 2);
  GemmBatches batches =
      split_batches(out_batch, ep.batch_a, ep.batch_b, p.m * p.k, p.k * p.n, p.m * p.n);
  p.batch = batches.batch;
  p.stride_a = batches.stride_a;
  p.stride_b = batches.stride_b;
  p.stride_d = batches.stride_d;
  call.calls = std::move(batches.calls);
  // A batch that shares its weights (B's stride 0) and whose A and D matrices follow one another
  // is one GEMM of batch x M rows: B is then read once, not once per batch. A decode step's
  // [batch, 1, K] activations against [K, N] weights were batch GEMVs, each streaming all the
  // weights (batch 8 ran 3.9x slower per step than batch 1 on the H100).
  if (p.batch > 1 && p.stride_b == 0 && !p.transpose_a && p.stride_a == p.m * p.k &&
      p.stride_d == p.m * p.n) {
    p.m *= p.batch;
    p.batch = 1;
    p.stride_a = p.stride_d = 0;
  }
  // Buffers are 256-byte aligned (jit/runtime/device.h); a call that starts inside one is aligned
  // to the largest power of two dividing its offset in bytes.
  const int64_t elem = dtype_size(p.dtype);
  for (const GemmOffsets& o : call.calls) {
    for (int64_t off : {o.a, o.b, o.d}) {
      const int64_t bytes = off * elem;
      if (bytes != 0) p.alignment = std::min(p.alignment, bytes & -bytes);
    }
  }
  return call;
}

std::string gemm_call_label(const GemmCall& call) {
  const GemmProblem& p = call.problem;
  std::string epilogue;
  if (call.int8_b) epilogue += "+int8_weights";
  if (call.scale >= 0) epilogue += "+scale";
  if (p.has_bias) epilogue += "+bias";
  if (p.activation == GemmProblem::Activation::relu) epilogue += "+relu";
  if (p.activation == GemmProblem::Activation::gelu_tanh) epilogue += "+gelu_tanh";
  if (p.has_residual) epilogue += "+residual";
  const size_t calls = call.calls.size();
  return fmt::format("{} {}x{}x{}{}{} {}{}", call.int8_b ? "gemm" : "cublasLt", p.m, p.n, p.k,
                     p.batch > 1 ? fmt::format(" x{}", p.batch) : "",
                     calls > 1 ? fmt::format(" ({} calls)", calls) : "", dtype_name(p.dtype),
                     epilogue);
}

static_assert(fusion::kInt8GemmMaxRows == templates::kGemvMaxRows,
              "the plan keeps int8 weights for the calls the skinny-GEMM kernel takes");

namespace {

std::optional<templates::GemvSpec> refused(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return std::nullopt;
}

}  // namespace

std::optional<templates::GemvSpec> gemv_spec(const GemmCall& call, GemvMode mode,
                                             std::string* why) {
  const GemmProblem& p = call.problem;
  if (mode == GemvMode::off && !call.int8_b) return refused(why, "FUSEJIT_GEMV=0");
  if (call.calls.size() != 1 || !(call.calls[0] == GemmOffsets{}))
    return refused(
        why, fmt::format("{} calls at offsets (the kernel takes one, at 0)", call.calls.size()));
  if (p.alignment < 16)
    return refused(why, fmt::format("buffers {}-byte aligned (needs 16)", p.alignment));
  // (describe_gemm_call has folded a batch of stacked rows that share B into M already.)
  if (p.batch != 1)
    return refused(why, fmt::format("a batch of {} that is not one stack of rows", p.batch));
  using Act = fusion::GemmEpilogue::Activation;
  const Act act = p.activation == GemmProblem::Activation::relu        ? Act::relu
                  : p.activation == GemmProblem::Activation::gelu_tanh ? Act::gelu_tanh
                                                                       : Act::none;
  templates::GemvSpec s{.dtype = p.dtype, .activation = act};
  std::tie(s.m, s.n, s.k, s.alpha, s.beta) = std::tuple(p.m, p.n, p.k, p.alpha, p.beta);
  std::tie(s.transpose_a, s.transpose_b, s.bias, s.residual) =
      std::tuple(p.transpose_a, p.transpose_b, p.has_bias, p.has_residual);
  s.int8_weights = call.int8_b;
  s.scale = call.scale >= 0;
  if (std::string no = templates::refuse_gemv(s); !no.empty()) return refused(why, std::move(no));
  if (mode == GemvMode::large && !s.int8_weights &&
      !(s.m == 1 && s.n * s.k >= templates::kGemvLargeMinWeights &&
        (s.dtype == DType::bf16 || s.dtype == DType::f16))) {
    return refused(
        why, fmt::format("FUSEJIT_GEMV=auto takes 1 row of bf16/f16 against at least "
                         "{} weights; here {} rows, {} {}; 1 forces it",
                         templates::kGemvLargeMinWeights, s.m, s.n * s.k, dtype_name(s.dtype)));
  }
  return s;
}

std::vector<ir::NodeId> gemv_arguments(const GemmCall& call, const fusion::Region* producer) {
  std::vector<ir::NodeId> args;
  if (producer)
    args = producer->inputs;
  else
    args = {call.a};
  args.push_back(call.b);
  if (call.scale >= 0) args.push_back(call.scale);
  if (call.problem.has_bias) args.push_back(call.bias);
  if (call.problem.has_residual) args.push_back(call.residual);
  args.push_back(call.d);
  return args;
}

std::optional<templates::Kernel> gemv_kernel(const GemmCall& call,
                                             const templates::CodegenOptions& codegen,
                                             std::string* why, const ir::Graph* graph,
                                             const fusion::Region* producer,
                                             const fusion::Region* consumer) {
  std::optional<templates::GemvSpec> spec = gemv_spec(call, codegen.gemv, why);
  if (!spec) return std::nullopt;
  templates::GemvPrologue prologue{graph, producer, codegen};
  if (producer) spec->prologue = &prologue;
  templates::GemvEpilogue epilogue{graph, consumer, codegen};
  if (consumer) spec->epilogue = &epilogue;
  spec->ring = codegen.gemv_ring;
  templates::Kernel k = templates::generate_gemv(
      *spec, codegen.target, codegen.grid_dependency || codegen.gemv_grid_dependency);
  k.params = gemv_arguments(call, producer);
  return k;
}

}  // namespace fusejit::jit
