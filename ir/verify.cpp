// ir/verify: the graph invariant checker; see verify.h.
//
// Graph::add makes valid nodes, but passes build graphs too; verify() re-derives each node from
// what defines it and compares, so a pass that rewires operands, drops an attribute or keeps a
// stale type is caught where it happened rather than in a generated kernel.
#include "ir/verify.h"

#include <cmath>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusejit/error.h"
#include "ir/text.h"

namespace fusejit::ir {

namespace {

[[noreturn]] void fail(const Graph& g, const std::string& what) {
  throw InternalError(fmt::format("verify: {}\nthe graph:\n{}", what, print(g)));
}

// Names the first field where the node differs from what inference gives.
std::string difference(const Node& have, const Node& want) {
  if (have.dtype != want.dtype || have.shape != want.shape) {
    return fmt::format("its type is {} but inference gives {}", type_str(have), type_str(want));
  }
  if (have.axes != want.axes) {
    return fmt::format("its axes are [{}] but inference gives [{}]", fmt::join(have.axes, ","),
                       fmt::join(want.axes, ","));
  }
  if (have.keepdim != want.keepdim) {
    return fmt::format("its keepdim is {} but inference gives {}", have.keepdim, want.keepdim);
  }
  if (have.start != want.start || have.step != want.step) {
    return fmt::format("its start and step are {} and {} but inference gives {} and {}",
                       have.start, have.step, want.start, want.step);
  }
  if (have.seed != want.seed || have.offset != want.offset) {
    return fmt::format("its seed/offset are {}/{} but inference gives {}/{}", have.seed,
                       have.offset, want.seed, want.offset);
  }
  return "its operands differ from what inference keeps";
}

}  // namespace

void verify(const Graph& g) {
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    const std::string where = fmt::format("node %{} ({})", i, op_name(n.op));
    if (!arity_ok(n.op, n.inputs.size())) {
      fail(g, fmt::format("{} has {} operand(s), but {} takes {}", where, n.inputs.size(),
                          op_name(n.op), arity_str(n.op)));
    }
    for (NodeId id : n.inputs) {
      if (id < 0 || static_cast<size_t>(id) >= i) {
        fail(g, fmt::format("{} reads %{}, which is not an earlier node", where, id));
      }
    }
    // Inference reads every field the op uses and ignores the rest; a stray field on an op that
    // does not use it comes back at its default and shows up as a difference.
    Node inferred;
    try {
      inferred = infer_node(g, spec_of(n));
    } catch (const Error& e) {
      fail(g, fmt::format("{} is ill-formed: {}", where, e.what()));
    }
    // Values compare apart, because a NaN constant is well-formed but NaN != NaN.
    Node have = n;
    const bool same_value =
        have.value == inferred.value || (std::isnan(have.value) && std::isnan(inferred.value));
    if (!same_value) {
      fail(g, fmt::format("{} holds the value {}, but inference gives {}", where, have.value,
                          inferred.value));
    }
    have.value = inferred.value = 0.0;
    if (have != inferred) {
      fail(g, fmt::format("{} is not what inference gives: {}", where, difference(have, inferred)));
    }
  }
  if (g.outputs().empty()) fail(g, "the graph has no outputs; every trace names at least one");
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const NodeId id = g.outputs()[k];
    if (id < 0 || static_cast<size_t>(id) >= g.size()) {
      fail(g, fmt::format("output {} is %{}, but the graph has {} nodes", k, id, g.size()));
    }
  }
}

}  // namespace fusejit::ir
