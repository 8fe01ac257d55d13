// fusion/epilogue: see epilogue.h.
//
// cuBLASLt computes D = act(alpha * (A @ B) + beta * C + bias) in f32 and rounds once to D's
// dtype; the graph rounds after each node. Folding is therefore exact up to that rounding, which
// is what a fused kernel does too (fp32 compute, 16-bit storage).
#include "fusion/epilogue.h"

#include <algorithm>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "ir/host_tensor.h"
#include "ir/shape.h"

namespace fusejit::fusion::detail {

namespace {

using ir::Node;
using ir::Op;
using Activation = GemmEpilogue::Activation;

// A value cuBLASLt can read: a graph input or something a region writes.
bool is_buffer(const Dataflow& df, NodeId id) {
  const NodeRole r = df.role_of(id);
  return r == NodeRole::input || r == NodeRole::compute || r == NodeRole::gemm;
}

// The value of a scalar constant (as the reference rounds it), looking through free views of
// it; nothing when `id` is anything else.
std::optional<double> scalar_constant(const Dataflow& df, NodeId id) {
  while (df.is_free(id)) {
    const Node& n = df.node(id);
    if (n.op == Op::constant) return ir::round_to(n.dtype, n.value);
    if (ir::op_kind(n.op) != ir::OpKind::view || n.op == Op::concat) return std::nullopt;
    id = n.inputs[0];
  }
  return std::nullopt;
}

// [n] or [1,...,1,n].
bool is_row_vector(const Shape& s, int64_t n) {
  if (s.empty() || s.back() != n) return false;
  return std::all_of(s.begin(), s.end() - 1, [](int64_t d) { return d == 1; });
}

// The buffer of a bias along the last dim (of length n): `id` itself when it is a buffer of shape
// [n] or [1,..,1,n], or such a buffer under reshapes and expands that keep every element in the
// last axis (so element (..., j) of `id` is element j of the buffer). -1 otherwise.
NodeId bias_buffer(const Dataflow& df, NodeId id, int64_t n) {
  for (;;) {
    const Node& node = df.node(id);
    if (!df.is_free(id)) return is_buffer(df, id) && is_row_vector(node.shape, n) ? id : -1;
    if (node.op != Op::reshape && node.op != Op::expand) return -1;
    if (node.op == Op::reshape && !is_row_vector(node.shape, n)) return -1;
    if (!is_row_vector(df.node(node.inputs[0]).shape, n)) return -1;
    id = node.inputs[0];
  }
}

std::string op_at(const Dataflow& df, NodeId id) {
  return fmt::format("{} %{}", ir::op_name(df.node(id).op), id);
}

std::string id_list(const std::vector<NodeId>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    out += fmt::format("{}%{}", i == 0 ? "" : i + 1 == ids.size() ? " and " : ", ", ids[i]);
  }
  return out;
}

// What folding one node gives: a description of the fold, or the reason it cannot.
struct Verdict {
  bool ok = false;
  std::string text;
};
Verdict folds(std::string what) { return {true, std::move(what)}; }
Verdict refuse(std::string why) { return {false, std::move(why)}; }

// Follows one matmul's chain of readers, folding what its epilogue can compute.
class Chain {
 public:
  Chain(const Dataflow& df, NodeId matmul, std::vector<NodeId>& owner, EpilogueMatch& out)
      : df_(df), m_(matmul), mm_(df.node(matmul)), owner_(owner), out_(out) {}

  void run(const PartitionOptions& options) {
    out_.output = m_;
    const GemmOperands& ops = df_.gemm[static_cast<size_t>(m_)];
    out_.epilogue.transpose_a = ops.transpose_a;
    out_.epilogue.transpose_b = ops.transpose_b;
    out_.epilogue.batch_a = ops.batch_a;
    out_.epilogue.batch_b = ops.batch_b;
    out_.epilogue.int8_b = ops.int8_b;
    NodeId cur = m_;
    for (;;) {
      const std::vector<NodeId>& readers = df_.readers[static_cast<size_t>(cur)];
      std::vector<NodeId> candidates;  // readers a kernel would compute (not matmuls)
      for (NodeId r : readers) {
        if (df_.role_of(r) == NodeRole::compute) candidates.push_back(r);
      }
      if (candidates.empty()) break;  // written for the graph or read by other matmuls only
      Verdict v;
      bool explained_elsewhere = false;
      if (!options.fusion) {
        v = refuse("fusion disabled");
      } else if (!options.epilogue) {
        v = refuse("epilogue folding disabled (FUSEJIT_DISABLE=epilogue)");
      } else if (df_.graph_output[static_cast<size_t>(cur)]) {
        v = refuse(fmt::format(
            "%{} is a graph output, so it is written as it is: {} cannot fold into the epilogue",
            cur, candidates.size() == 1 ? op_at(df_, candidates[0]) : "what reads it"));
      } else if (readers.size() > 1) {
        v = refuse(fmt::format(
            "%{} is read by {}, so it is written as it is: nothing after it folds into the "
            "epilogue",
            cur, id_list(readers)));
      } else if (const NodeId other = owner_[static_cast<size_t>(readers[0])]; other >= 0) {
        v =
            refuse(fmt::format("{} folds into the epilogue of matmul %{}, which reads %{} from "
                               "memory",
                               op_at(df_, readers[0]), other, cur));
        explained_elsewhere = true;  // that chain listed the read
      } else {
        v = fold(cur, readers[0]);
      }
      if (!v.ok) {
        out_.epilogue.refusals.push_back(v.text);
        if (!explained_elsewhere) {
          for (NodeId c : candidates) {
            note(cur, c, false,
                 fmt::format("matmul %{} is a library call: what follows starts a new region ({})",
                             m_, v.text));
          }
        }
        break;
      }
      take(readers[0]);
      note(cur, readers[0], true, folded(v.text));
      cur = out_.output = readers[0];
    }
    std::sort(out_.folded.begin(), out_.folded.end());
  }

 private:
  std::string folded(const std::string& what) const {
    if (out_.epilogue.int8_b) {
      return fmt::format(
          "folded into the epilogue of matmul %{} (int8 weights: the gemv "
          "kernel's): {}",
          m_, what);
    }
    return fmt::format("folded into the cuBLASLt epilogue of matmul %{}: {}", m_, what);
  }

  void take(NodeId n) {
    owner_[static_cast<size_t>(n)] = m_;
    out_.folded.push_back(n);
  }

  void note(NodeId producer, NodeId consumer, bool fused, std::string reason) {
    out_.decisions.push_back({producer, consumer, fused, std::move(reason)});
  }

  // The epilogue reads `value` from memory (inputs are not listed, as elsewhere).
  void note_read(NodeId value, NodeId consumer, std::string_view as) {
    if (df_.role_of(value) == NodeRole::input) return;
    note(value, consumer, false,
         fmt::format("read from memory by the cuBLASLt epilogue of matmul %{} as its {}", m_, as));
  }

  std::optional<std::string> type_change(NodeId n) const {
    const Node& node = df_.node(n);
    if (node.dtype == mm_.dtype && node.shape == mm_.shape) return std::nullopt;
    return fmt::format("{} gives {}, but the GEMM writes {}", op_at(df_, n), ir::type_str(node),
                       ir::type_str(mm_));
  }

  // How many times `id` reads `cur`, itself or through free views (a concat's every operand).
  int reads_through_views(NodeId id, NodeId cur) const {
    if (id == cur) return 1;
    if (!df_.is_free(id) || ir::op_kind(df_.node(id).op) != ir::OpKind::view) return 0;
    int n = 0;
    for (NodeId in : df_.node(id).inputs) n += reads_through_views(in, cur);
    return n;
  }

  // Folds `n`, the only reader of `cur` (the value computed so far), when it can.
  Verdict fold(NodeId cur, NodeId n) {
    const Node& node = df_.node(n);
    if (std::find(node.inputs.begin(), node.inputs.end(), cur) == node.inputs.end()) {
      return refuse(fmt::format("{} reads %{} through a view", op_at(df_, n), cur));
    }
    int uses = 0;  // of cur, directly or through views
    for (NodeId in : node.inputs) uses += reads_through_views(in, cur);
    if (uses > 1) return refuse(fmt::format("{} reads %{} twice", op_at(df_, n), cur));
    const GemmEpilogue& e = out_.epilogue;
    if (e.activation != Activation::none) {
      return refuse(
          fmt::format("{} comes after the {} activation, which cuBLASLt applies last: "
                      "D = act(alpha * (A @ B) + beta * C + bias)",
                      op_at(df_, n), activation_name(e.activation)));
    }
    switch (node.op) {
      case Op::relu:
        return fold_activation(n, Activation::relu);
      case Op::gelu_tanh:
        return fold_activation(n, Activation::gelu_tanh);
      case Op::gelu:
        return refuse(fmt::format(
            "{} is the exact (erf) GELU; cuBLASLt's GELU epilogue is the tanh approximation, so "
            "only gelu_tanh folds",
            op_at(df_, n)));
      case Op::mul:
        return fold_mul(n, node.inputs[0] == cur ? node.inputs[1] : node.inputs[0]);
      case Op::add:
        return fold_add(n, node.inputs[0] == cur ? node.inputs[1] : node.inputs[0]);
      default:
        return refuse(fmt::format(
            "{} is not something cuBLASLt's epilogue computes (alpha, bias, residual, relu, "
            "gelu_tanh)",
            op_at(df_, n)));
    }
  }

  Verdict fold_activation(NodeId n, Activation a) {
    if (auto why = type_change(n)) return refuse(*why);
    out_.epilogue.activation = a;
    const bool bias = out_.epilogue.bias >= 0;
    const std::string_view name = a == Activation::relu ? "RELU" : "GELU";
    return folds(fmt::format("{}{} (epilogue {}{})", activation_name(a),
                             bias ? " after the bias" : "", name, bias ? "_BIAS" : ""));
  }

  // x * c: alpha, as long as nothing has been added yet (alpha scales only A @ B). With int8
  // weights, x * s for a vector s along the last dim: their per-channel scale.
  Verdict fold_mul(NodeId n, NodeId other) {
    const std::optional<double> c = scalar_constant(df_, other);
    if (!c && out_.epilogue.int8_b) return fold_scale(n, other);
    if (!c) {
      return refuse(
          fmt::format("{} multiplies by %{}, not a scalar constant: only a constant "
                      "factor folds, as alpha",
                      op_at(df_, n), other));
    }
    if (auto why = type_change(n)) return refuse(*why);
    GemmEpilogue& e = out_.epilogue;
    if (e.bias >= 0 || e.residual >= 0) {
      return refuse(
          fmt::format("{} scales after a bias or residual is added, but alpha scales "
                      "only A @ B",
                      op_at(df_, n)));
    }
    e.alpha *= *c;
    return folds(fmt::format("alpha = {}", e.alpha));
  }

  // x * scale[n] after an int8 GEMM, before anything is added (it scales only A @ B).
  Verdict fold_scale(NodeId n, NodeId other) {
    GemmEpilogue& e = out_.epilogue;
    const NodeId s = bias_buffer(df_, other, mm_.shape.back());
    if (s < 0) {
      return refuse(fmt::format(
          "{} multiplies by %{}, neither a scalar constant (alpha) nor a vector [{}] along the "
          "last dim (the int8 weights' per-channel scale)",
          op_at(df_, n), other, mm_.shape.back()));
    }
    if (df_.node(s).dtype != mm_.dtype) {
      return refuse(fmt::format("scale %{} is {} but the GEMM writes {}", s,
                                dtype_name(df_.node(s).dtype), dtype_name(mm_.dtype)));
    }
    if (e.scale >= 0) return refuse(fmt::format("{} scales a second time", op_at(df_, n)));
    if (e.bias >= 0 || e.residual >= 0) {
      return refuse(fmt::format(
          "{} scales after a bias or residual is added, but the scale applies to A @ B only",
          op_at(df_, n)));
    }
    if (auto why = type_change(n)) return refuse(*why);
    e.scale = s;
    note_read(s, n, "scale");
    return folds(fmt::format("scale %{}, the int8 weights' scale per output channel", s));
  }

  // x + bias, or x + C, or x + C * c (beta = c).
  Verdict fold_add(NodeId n, NodeId other) {
    GemmEpilogue& e = out_.epilogue;
    const int64_t cols = mm_.shape.back();
    if (const NodeId b = bias_buffer(df_, other, cols); b >= 0) {
      const Node& bn = df_.node(b);
      if (bn.dtype != mm_.dtype) {
        return refuse(
            fmt::format("bias %{} is {} but the GEMM writes {}: cuBLASLt's bias has the "
                        "output's dtype",
                        b, dtype_name(bn.dtype), dtype_name(mm_.dtype)));
      }
      if (e.bias >= 0) {
        return refuse(
            fmt::format("{} adds a second bias %{}: the epilogue adds one", op_at(df_, n), b));
      }
      if (auto why = type_change(n)) return refuse(*why);
      e.bias = b;
      note_read(b, n, "bias");
      return folds(fmt::format("bias %{}, a vector along the last dim", b));
    }

    // A residual, possibly scaled by a constant that only it reads.
    NodeId c = other, scale = -1;
    double beta = 1.0;
    const Node& on = df_.node(other);
    const size_t oi = static_cast<size_t>(other);
    if (on.op == Op::mul && df_.role[oi] == NodeRole::compute && owner_[oi] < 0 &&
        !df_.graph_output[oi] && df_.readers[oi] == std::vector<NodeId>{n} &&
        on.dtype == mm_.dtype && on.shape == mm_.shape) {
      for (int k = 0; k < 2; ++k) {
        const NodeId x = on.inputs[static_cast<size_t>(k)],
                     f = on.inputs[static_cast<size_t>(1 - k)];
        const std::optional<double> v = scalar_constant(df_, f);
        if (v && x != f && is_buffer(df_, x) && df_.node(x).shape == mm_.shape) {
          c = x;
          beta = *v;
          scale = other;
          break;
        }
      }
    }
    const Node& cn = df_.node(c);
    if (cn.shape != mm_.shape) {
      return refuse(fmt::format(
          "{} adds %{} {}: neither a bias (a vector [{}] along the last dim) nor a residual of the "
          "output's full shape {}",
          op_at(df_, n), other, ir::shape_str(cn.shape), cols, ir::shape_str(mm_.shape)));
    }
    if (!is_buffer(df_, c)) {
      return refuse(
          fmt::format("{} adds %{} ({}), which is not in memory: a residual is read from "
                      "a buffer laid out as the output",
                      op_at(df_, n), c, ir::op_name(cn.op)));
    }
    if (cn.dtype != mm_.dtype) {
      return refuse(
          fmt::format("residual %{} is {} but the GEMM writes {}: C has the output's "
                      "dtype",
                      c, dtype_name(cn.dtype), dtype_name(mm_.dtype)));
    }
    if (e.residual >= 0) {
      return refuse(
          fmt::format("{} adds a second residual %{}: the epilogue adds one C", op_at(df_, n), c));
    }
    if (auto why = type_change(n)) return refuse(*why);
    e.residual = c;
    e.beta = beta;
    if (scale >= 0) {
      take(scale);
      note(scale, n, true, folded(fmt::format("beta = {} scales the residual %{}", beta, c)));
    }
    note_read(c, scale >= 0 ? scale : n, "residual");
    return folds(fmt::format("residual %{} added through beta = {}", c, beta));
  }

  const Dataflow& df_;
  const NodeId m_;
  const Node& mm_;
  std::vector<NodeId>& owner_;
  EpilogueMatch& out_;
};

}  // namespace

std::vector<EpilogueMatch> match_epilogues(const Dataflow& df, const PartitionOptions& options) {
  std::vector<EpilogueMatch> matches(df.role.size());
  std::vector<NodeId> owner(df.role.size(), -1);  // the matmul a node folded into
  for (size_t i = 0; i < df.role.size(); ++i) {
    if (df.role[i] != NodeRole::gemm) continue;
    Chain(df, static_cast<NodeId>(i), owner, matches[i]).run(options);
  }
  return matches;
}

}  // namespace fusejit::fusion::detail
