// jit/cudnn_attention: the composite attention graph for cuDNN; see cudnn_attention.h.
#include "jit/libs/cudnn_attention.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusejit/error.h"

namespace fusejit::jit::cudnn {

namespace {

using Dims = std::array<int64_t, 4>;

// The unique ids of the tensors the caller provides (the variant pack's) and of the virtual
// ones; any distinct values do.
enum TensorId : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kScale,
  kBias,
  kFill,
  kScores = 100,
  kScaled,
  kBiased,
  kRow,
  kCol,
  kKeep,
  kMasked,
  kMax,
  kCentered,
  kExp,
  kSum,
  kProbabilities,
  kLogSum,
  kStats,
};

// cuDNN's fused engines take 16-byte aligned data; the caller's pointers are checked for it.
constexpr int64_t kAlignment = 16;

Dims dense_strides(const Dims& dims) {
  return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
}

// A size-1 dim's stride is never read, but cuDNN checks strides; give it the dense one
// (as PyTorch's fixSizeOneDimStrideSDPA does), so that a caller's 0 there is accepted.
AttentionTensor fix_unit_strides(AttentionTensor t) {
  const Dims dense = dense_strides(t.dims);
  for (int i = 0; i < 4; ++i) {
    if (t.dims[i] == 1) t.strides[i] = dense[i];
  }
  return t;
}

DataType cudnn_type(DType t) {
  switch (t) {
    case DType::f16:
      return DataType::float16;
    case DType::bf16:
      return DataType::bfloat16;
    case DType::f32:
      return DataType::float32;
    default:
      break;
  }
  throw InternalError(fmt::format("cudnn_type: no cuDNN type for {}", dtype_name(t)));
}

std::string tensor_text(const char* name, const AttentionTensor& t) {
  return fmt::format("{}[{}] strides [{}]", name, fmt::join(t.dims, ","),
                     fmt::join(t.strides, ","));
}

// Why `t` cannot be one of the problem's tensors, or "".
std::string refuse_layout(const char* name, const AttentionTensor& t) {
  for (int i = 0; i < 4; ++i) {
    if (t.dims[i] < 1) return fmt::format("{}: every dim must be at least 1", tensor_text(name, t));
  }
  for (int i = 0; i < 4; ++i) {
    if (t.dims[i] > 1 && t.strides[i] < 1) {
      return fmt::format(
          "{}: a stride of {} (broadcast or reversed) is not supported; make the "
          "tensor contiguous",
          tensor_text(name, t), t.strides[i]);
    }
  }
  if (t.dims[3] > 1 && t.strides[3] != 1) {
    return fmt::format("{}: the last axis must be contiguous (stride 1)", tensor_text(name, t));
  }
  return "";
}

}  // namespace

AttentionTensor AttentionTensor::contiguous(int64_t b, int64_t h, int64_t s, int64_t d) {
  AttentionTensor t{{b, h, s, d}, {}};
  t.strides = dense_strides(t.dims);
  return t;
}

AttentionProblem AttentionProblem::contiguous(DType dtype, int64_t b, int64_t hq, int64_t hk,
                                              int64_t sq, int64_t skv, int64_t d, int64_t dv) {
  AttentionProblem p;
  p.dtype = dtype;
  p.q = AttentionTensor::contiguous(b, hq, sq, d);
  p.k = AttentionTensor::contiguous(b, hk, skv, d);
  p.v = AttentionTensor::contiguous(b, hk, skv, dv);
  p.o = AttentionTensor::contiguous(b, hq, sq, dv);
  p.bias_dtype = dtype;
  return p;
}

std::string AttentionProblem::describe() const {
  std::string text = fmt::format("{} {} {} {} {}", dtype_name(dtype), tensor_text("q", q),
                                 tensor_text("k", k), tensor_text("v", v), tensor_text("o", o));
  if (mask == AttentionMaskKind::causal) text += " causal";
  if (mask == AttentionMaskKind::bias) {
    text += fmt::format(" + {} {}", dtype_name(bias_dtype), tensor_text("bias", bias));
  }
  return text;
}

std::string refuse_attention(const AttentionProblem& p) {
  const auto refuse = [&](std::string why) {
    return fmt::format("cuDNN attention refused: {} ({})", why, p.describe());
  };
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) {
    return refuse(fmt::format("the dtype is {}; cuDNN's fused attention takes f16 or bf16",
                              dtype_name(p.dtype)));
  }
  for (const auto& [name, t] : {std::pair{"q", &p.q}, {"k", &p.k}, {"v", &p.v}, {"o", &p.o}}) {
    if (std::string why = refuse_layout(name, *t); !why.empty()) return refuse(why);
  }
  const auto [b, hq, sq, d] = p.q.dims;
  const int64_t hk = p.k.dims[1], skv = p.k.dims[2], dv = p.v.dims[3];
  if (p.k.dims[0] != b || p.v.dims[0] != b || p.o.dims[0] != b) {
    return refuse("q, k, v and o must have the same batch");
  }
  if (p.k.dims[3] != d) {
    return refuse(fmt::format("the head dims of q ({}) and k ({}) differ", d, p.k.dims[3]));
  }
  if (p.v.dims[1] != hk || p.v.dims[2] != skv) {
    return refuse("k and v must have the same heads and sequence length");
  }
  if (hq % hk != 0) {
    return refuse(fmt::format("q's {} heads are not a multiple of k and v's {} heads", hq, hk));
  }
  if (p.o.dims != Dims{b, hq, sq, dv}) {
    return refuse(
        fmt::format("o must be [{},{},{},{}] (q's batch, heads and sequence, v's "
                    "head dim)",
                    b, hq, sq, dv));
  }
  for (const auto& [name, dim] : {std::pair{"q and k", d}, {"v", dv}}) {
    if (dim % 8 != 0 || dim > 256) {
      return refuse(
          fmt::format("the head dim of {} is {}; cuDNN's fused attention needs a "
                      "multiple of 8, at most 256",
                      name, dim));
    }
  }
  if (p.mask == AttentionMaskKind::bias) {
    if (p.bias_dtype != DType::f16 && p.bias_dtype != DType::bf16 && p.bias_dtype != DType::f32) {
      return refuse(
          fmt::format("the bias is {}; it must be f16, bf16 or f32", dtype_name(p.bias_dtype)));
    }
    if (std::string why = refuse_layout("bias", p.bias); !why.empty()) return refuse(why);
    const Dims& bd = p.bias.dims;
    if ((bd[0] != 1 && bd[0] != b) || (bd[1] != 1 && bd[1] != hq) || bd[2] != sq || bd[3] != skv) {
      return refuse(fmt::format("the bias must be [{} or 1, {} or 1, {}, {}]", b, hq, sq, skv));
    }
  }
  return "";
}

// ---- graph

AttentionGraph::AttentionGraph(std::shared_ptr<const Api> api, const AttentionProblem& problem,
                               Handle handle)
    : api_(std::move(api)), problem_(problem) {
  if (std::string why = refuse_attention(problem_); !why.empty()) throw UsageError(why);
  if (!handle && api_->graph_needs_handle()) {
    throw UsageError(
        fmt::format("cuDNN {} needs a handle (a GPU) to build an operation graph; "
                    "9.8 and later do not",
                    api_->version_text()));
  }
  problem_.q = fix_unit_strides(problem_.q);
  problem_.k = fix_unit_strides(problem_.k);
  problem_.v = fix_unit_strides(problem_.v);
  problem_.o = fix_unit_strides(problem_.o);
  problem_.bias = fix_unit_strides(problem_.bias);
  // -inf from 9.10 on; before it, cuDNN's engines want the lowest finite float.
  fill_ = api_->version >= 91000 ? -std::numeric_limits<float>::infinity()
                                 : std::numeric_limits<float>::lowest();

  const DataType io = cudnn_type(problem_.dtype);
  const AttentionTensor& k = problem_.k;
  const Descriptor q = build_tensor(kQ, io, problem_.q.dims, problem_.q.strides, false);
  // Kᵀ: k's last two dims and strides swapped.
  const Descriptor kt =
      build_tensor(kK, io, {k.dims[0], k.dims[1], k.dims[3], k.dims[2]},
                   {k.strides[0], k.strides[1], k.strides[3], k.strides[2]}, false);
  const Descriptor v = build_tensor(kV, io, problem_.v.dims, problem_.v.strides, false);
  const Descriptor o = build_tensor(kO, io, problem_.o.dims, problem_.o.strides, false);
  add_softmax_times_v(add_scores(q, kt), v, o);

  graph_ = make(DescriptorType::operation_graph);
  set(graph_, Attribute::operation_graph_ops, AttributeType::descriptor,
      static_cast<int64_t>(ops_.size()), ops_.data(), "operation graph ops");
  if (handle) {
    set(graph_, Attribute::operation_graph_handle, AttributeType::handle, 1, &handle,
        "operation graph handle");
    graph_has_handle_ = true;
  }
  finalize(graph_, "operation graph");
}

AttentionGraph::~AttentionGraph() {
  // The plan first, the tensors last: the reverse of creation.
  while (!owned_.empty()) owned_.pop_back();
}

Descriptor AttentionGraph::make(DescriptorType type) {
  owned_.push_back(make_descriptor(*api_, type));
  return owned_.back().get();
}

void AttentionGraph::set(Descriptor d, Attribute a, AttributeType type, int64_t count,
                         const void* elements, const char* what) {
  api_->check(api_->set_attribute(d, a, type, count, elements),
              fmt::format("cudnnBackendSetAttribute({}, attribute {})", what, static_cast<int>(a)));
}

void AttentionGraph::finalize(Descriptor d, const char* what) {
  api_->check(api_->finalize(d), fmt::format("cudnnBackendFinalize({})", what));
}

Descriptor AttentionGraph::build_tensor(int64_t id, DataType type, const Dims& dims,
                                        const Dims& strides, bool is_virtual, bool by_value) {
  const Descriptor t = make(DescriptorType::tensor);
  set(t, Attribute::tensor_data_type, AttributeType::data_type, 1, &type, "tensor");
  set(t, Attribute::tensor_dimensions, AttributeType::int64, 4, dims.data(), "tensor");
  set(t, Attribute::tensor_strides, AttributeType::int64, 4, strides.data(), "tensor");
  set(t, Attribute::tensor_unique_id, AttributeType::int64, 1, &id, "tensor");
  set(t, Attribute::tensor_byte_alignment, AttributeType::int64, 1, &kAlignment, "tensor");
  set(t, Attribute::tensor_is_virtual, AttributeType::boolean, 1, &is_virtual, "tensor");
  if (by_value)
    set(t, Attribute::tensor_is_by_value, AttributeType::boolean, 1, &by_value, "tensor");
  finalize(t, "tensor");
  return t;
}

Descriptor AttentionGraph::virtual_scores(int64_t id, DataType type) {
  const auto [b, hq, sq, d] = problem_.q.dims;
  const Dims scores{b, hq, sq, problem_.k.dims[2]};
  return build_tensor(id, type, scores, dense_strides(scores), true);
}

// S = (Q Kᵀ) * scale [+ bias] [causal: keep ? S : fill], all f32.
Descriptor AttentionGraph::add_scores(Descriptor q, Descriptor kt) {
  const Dims unit{1, 1, 1, 1};
  const Descriptor scale = build_tensor(kScale, DataType::float32, unit, unit, false, true);
  const Descriptor s = virtual_scores(kScores);
  add_matmul(q, kt, s);
  Descriptor x = virtual_scores(kScaled);
  add_pointwise(PointwiseMode::mul, DataType::float32, s, scale, nullptr, x);
  if (problem_.mask == AttentionMaskKind::bias) {
    const AttentionTensor& b = problem_.bias;
    const Descriptor bias =
        build_tensor(kBias, cudnn_type(problem_.bias_dtype), b.dims, b.strides, false);
    const Descriptor biased = virtual_scores(kBiased);
    add_pointwise(PointwiseMode::add, DataType::float32, x, bias, nullptr, biased);
    x = biased;
  }
  if (problem_.mask == AttentionMaskKind::causal) {
    // keep = row >= col; masked = keep ? x : fill.
    const Descriptor fill = build_tensor(kFill, DataType::float32, unit, unit, false, true);
    const Descriptor rows = virtual_scores(kRow, DataType::int32);
    const Descriptor cols = virtual_scores(kCol, DataType::int32);
    const Descriptor keep = virtual_scores(kKeep, DataType::boolean);
    const Descriptor masked = virtual_scores(kMasked);
    add_pointwise(PointwiseMode::gen_index, DataType::float32, x, nullptr, nullptr, rows, 2);
    add_pointwise(PointwiseMode::gen_index, DataType::float32, x, nullptr, nullptr, cols, 3);
    add_pointwise(PointwiseMode::cmp_ge, DataType::boolean, rows, cols, nullptr, keep);
    add_pointwise(PointwiseMode::binary_select, DataType::float32, x, fill, keep, masked);
    x = masked;
  }
  return x;
}

// O = softmax(S) V over the key axis; P in the I/O type, as cuDNN's second matmul requires.
void AttentionGraph::add_softmax_times_v(Descriptor x, Descriptor v, Descriptor o) {
  const auto [b, hq, sq, d] = problem_.q.dims;
  const Dims row_dims{b, hq, sq, 1};
  const auto row = [&](int64_t id) {  // a virtual f32 tensor of one value per score row
    return build_tensor(id, DataType::float32, row_dims, dense_strides(row_dims), true);
  };
  const Descriptor max = row(kMax);
  const Descriptor centered = virtual_scores(kCentered);
  const Descriptor e = virtual_scores(kExp);
  const Descriptor sum = row(kSum);
  const Descriptor probabilities = virtual_scores(kProbabilities, cudnn_type(problem_.dtype));
  add_reduction(ReductionOperator::max, x, max);
  add_pointwise(PointwiseMode::sub, DataType::float32, x, max, nullptr, centered);
  add_pointwise(PointwiseMode::exp, DataType::float32, centered, nullptr, nullptr, e);
  add_reduction(ReductionOperator::add, e, sum);
  // The softmax statistics max + log(sum), virtual here: nothing reads them, but cuDNN's
  // attention engines recognise the graph only with them (without, 9.14 and 9.19 offer no
  // engine: "Dropout set of ops not configured correctly").
  const Descriptor log_sum = row(kLogSum);
  add_pointwise(PointwiseMode::log, DataType::float32, sum, nullptr, nullptr, log_sum);
  add_pointwise(PointwiseMode::add, DataType::float32, max, log_sum, nullptr, row(kStats));
  add_pointwise(PointwiseMode::div, DataType::float32, e, sum, nullptr, probabilities);
  add_matmul(probabilities, v, o);
}

void AttentionGraph::add_pointwise(PointwiseMode mode, DataType precision, Descriptor x,
                                   Descriptor b, Descriptor t, Descriptor y, int64_t axis) {
  const Descriptor pw = make(DescriptorType::pointwise);
  set(pw, Attribute::pointwise_mode, AttributeType::pointwise_mode, 1, &mode, "pointwise");
  set(pw, Attribute::pointwise_math_precision, AttributeType::data_type, 1, &precision,
      "pointwise");
  if (axis >= 0) set(pw, Attribute::pointwise_axis, AttributeType::int64, 1, &axis, "pointwise");
  finalize(pw, "pointwise");
  add_operation(DescriptorType::operation_pointwise,
                {{Attribute::operation_pointwise_descriptor, pw},
                 {Attribute::operation_pointwise_x, x},
                 {Attribute::operation_pointwise_b, b},
                 {Attribute::operation_pointwise_t, t},
                 {Attribute::operation_pointwise_y, y}},
                "pointwise operation");
}

void AttentionGraph::add_matmul(Descriptor a, Descriptor b, Descriptor c) {
  const Descriptor mm = make(DescriptorType::matmul);
  const DataType compute = DataType::float32;
  set(mm, Attribute::matmul_compute_type, AttributeType::data_type, 1, &compute, "matmul");
  finalize(mm, "matmul");
  add_operation(DescriptorType::operation_matmul,
                {{Attribute::operation_matmul_a, a},
                 {Attribute::operation_matmul_b, b},
                 {Attribute::operation_matmul_c, c},
                 {Attribute::operation_matmul_descriptor, mm}},
                "matmul operation");
}

void AttentionGraph::add_reduction(ReductionOperator reduce, Descriptor x, Descriptor y) {
  const Descriptor r = make(DescriptorType::reduction);
  const DataType compute = DataType::float32;
  set(r, Attribute::reduction_operator, AttributeType::reduction_operator, 1, &reduce, "reduction");
  set(r, Attribute::reduction_compute_type, AttributeType::data_type, 1, &compute, "reduction");
  finalize(r, "reduction");
  add_operation(DescriptorType::operation_reduction,
                {{Attribute::operation_reduction_x, x},
                 {Attribute::operation_reduction_y, y},
                 {Attribute::operation_reduction_descriptor, r}},
                "reduction operation");
}

void AttentionGraph::add_operation(DescriptorType type,
                                   std::initializer_list<std::pair<Attribute, Descriptor>> operands,
                                   const char* what) {
  const Descriptor op = make(type);
  for (const auto& [attribute, operand] : operands) {
    if (operand) set(op, attribute, AttributeType::descriptor, 1, &operand, what);
  }
  finalize(op, what);
  ops_.push_back(op);
}

// ---- plan and execution

std::string AttentionGraph::plan(Handle handle) {
  if (plan_) return "";
  const Descriptor heuristics = make(DescriptorType::engine_heuristics);
  const HeurMode mode = HeurMode::a;
  set(heuristics, Attribute::engine_heuristics_operation_graph, AttributeType::descriptor, 1,
      &graph_, "engine heuristics");
  set(heuristics, Attribute::engine_heuristics_mode, AttributeType::heur_mode, 1, &mode,
      "engine heuristics");
  if (!graph_has_handle_ && handle) {
    // A graph built without a handle names no device; the heuristics learn it from the
    // handle's device properties (9.8 and later), or they offer nothing.
    const Descriptor device = make(DescriptorType::device_properties);
    set(device, Attribute::device_properties_handle, AttributeType::handle, 1, &handle,
        "device properties");
    finalize(device, "device properties");
    set(heuristics, Attribute::engine_heuristics_device_properties, AttributeType::descriptor, 1,
        &device, "engine heuristics");
  }
  finalize(heuristics, "engine heuristics");
  int64_t count = 0;
  api_->check(api_->get_attribute(heuristics, Attribute::engine_heuristics_results,
                                  AttributeType::descriptor, 0, &count, nullptr),
              "cudnnBackendGetAttribute(engine heuristics results count)");
  if (count == 0) return "cuDNN's heuristics offer no engine for this attention graph";
  std::vector<OwnedDescriptor> configs;
  std::vector<Descriptor> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(make_descriptor(*api_, DescriptorType::engine_config));
    raw.push_back(configs.back().get());
  }
  int64_t returned = 0;
  api_->check(api_->get_attribute(heuristics, Attribute::engine_heuristics_results,
                                  AttributeType::descriptor, count, &returned, raw.data()),
              "cudnnBackendGetAttribute(engine heuristics results)");
  std::string refusals;
  for (int64_t i = 0; i < returned && i < count; ++i) {
    OwnedDescriptor plan = make_descriptor(*api_, DescriptorType::execution_plan);
    Status status = api_->set_attribute(plan.get(), Attribute::execution_plan_handle,
                                        AttributeType::handle, 1, &handle);
    if (status == 0) {
      status = api_->set_attribute(plan.get(), Attribute::execution_plan_engine_config,
                                   AttributeType::descriptor, 1, &raw[i]);
    }
    if (status == 0) status = api_->finalize(plan.get());
    if (status != 0) {
      refusals +=
          fmt::format("{}[config {}: {}]", refusals.empty() ? "" : " ", i, api_->describe(status));
      continue;
    }
    int64_t written = 0;
    api_->check(api_->get_attribute(plan.get(), Attribute::execution_plan_workspace_size,
                                    AttributeType::int64, 1, &written, &workspace_bytes_),
                "cudnnBackendGetAttribute(execution plan workspace size)");
    // The plan refers to its engine config: both live as long as the graph.
    owned_.push_back(std::move(configs[i]));
    owned_.push_back(std::move(plan));
    plan_ = owned_.back().get();
    return "";
  }
  return fmt::format("no execution plan of cuDNN's {} engine configs finalized: {}", returned,
                     refusals);
}

void AttentionGraph::execute(Handle handle, cudaStream_t stream, const AttentionArgs& args) {
  if (!plan_) throw InternalError("AttentionGraph::execute before a successful plan()");
  const bool bias = problem_.mask == AttentionMaskKind::bias;
  const bool causal = problem_.mask == AttentionMaskKind::causal;
  for (const auto& [name, ptr] : {std::pair<const char*, const void*>{"q", args.q},
                                  {"k", args.k},
                                  {"v", args.v},
                                  {"o", args.o},
                                  {"bias", args.bias}}) {
    if (std::string_view(name) == "bias" && !bias) continue;
    if (!ptr || reinterpret_cast<uintptr_t>(ptr) % kAlignment != 0) {
      throw UsageError(
          fmt::format("cuDNN attention: {} is {}; it must be a device pointer "
                      "aligned to {} bytes",
                      name, ptr, kAlignment));
    }
  }
  if (workspace_bytes_ > 0 && !args.workspace) {
    throw UsageError(
        fmt::format("cuDNN attention: the plan needs a workspace of {} bytes", workspace_bytes_));
  }
  float scale = args.scale;
  std::vector<int64_t> ids{kQ, kK, kV, kO, kScale};
  std::vector<void*> pointers{const_cast<void*>(args.q), const_cast<void*>(args.k),
                              const_cast<void*>(args.v), args.o, &scale};
  if (bias) {
    ids.push_back(kBias);
    pointers.push_back(const_cast<void*>(args.bias));
  }
  if (causal) {
    ids.push_back(kFill);
    pointers.push_back(&fill_);
  }
  OwnedDescriptor pack = make_descriptor(*api_, DescriptorType::variant_pack);
  const int64_t n = static_cast<int64_t>(ids.size());
  set(pack.get(), Attribute::variant_pack_unique_ids, AttributeType::int64, n, ids.data(),
      "variant pack");
  set(pack.get(), Attribute::variant_pack_data_pointers, AttributeType::void_ptr, n,
      pointers.data(), "variant pack");
  void* workspace = args.workspace;
  set(pack.get(), Attribute::variant_pack_workspace, AttributeType::void_ptr, 1, &workspace,
      "variant pack");
  finalize(pack.get(), "variant pack");
  api_->check(api_->set_stream(handle, stream), "cudnnSetStream");
  api_->check(api_->execute(handle, plan_, pack.get()), "cudnnBackendExecute");
}

}  // namespace fusejit::jit::cudnn
