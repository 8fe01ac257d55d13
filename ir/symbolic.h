// ir/symbolic: dynamic dims. A symbolic graph is a trace whose dynamic dims are symbols (a batch
// size B, a sequence length S), so that one plan and one set of kernels serve every value.
//
// Encoding: a dim of a symbolic graph is c * s1^e1 * s2^e2 ... with c static, stored as the
// integer c * p1^e1 * p2^e2 ..., where p_k is symbol k's sentinel: a prime (just under 2^15)
// that no static coefficient of the graph is a multiple of. Shape inference, the passes and the
// planner then run on a symbolic graph unchanged (a sentinel is just a large extent to them),
// and a dim decodes back to its terms by dividing out the sentinels. Nothing ever allocates or
// launches at sentinel sizes: execution, the reference and codegen see `instantiate`d graphs.
//
// Where a symbolic graph comes from: `generalize` turns a concrete trace plus the input axes that
// are dynamic (marked by the user, or seen taking a second value) into one, attributing every
// dim computed from them; `bind` finds the values under which a symbolic graph is a given
// concrete trace. Both verify by instantiating and comparing exactly, so a wrong attribution can
// only cost a specialization, never a wrong result.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusejit::ir {

// The most dynamic dims one graph may have: each multiplies its sentinel into the dims it
// appears in, and a dim of more of them would overflow 64 bits.
inline constexpr size_t kMaxDynamicDims = 4;

struct Symbol {
  std::string name;      // "B"; names are unique within a graph
  int64_t sentinel = 0;  // the prime standing for it in dims
  int64_t example = 1;   // a value it took (what `fusejit run` uses unless told otherwise)
};

struct SymbolicGraph {
  Graph graph;
  std::vector<Symbol> symbols;  // empty: a concrete trace
  bool operator==(const SymbolicGraph& o) const;
};

// One value per symbol, in the order of SymbolicGraph::symbols.
using Bindings = std::vector<int64_t>;

// A dim as its static coefficient times a power of each symbol.
struct DimTerms {
  int64_t coefficient = 1;
  std::vector<int> exponents;  // per symbol
  bool symbolic() const;
  // The dim when the symbols take `values`; throws fusejit::UsageError on overflow.
  int64_t value(const Bindings& values) const;
};
DimTerms dim_terms(int64_t dim, const std::vector<Symbol>& symbols);
// The dim's value when the symbols take `values`; throws fusejit::UsageError on overflow.
int64_t dim_value(int64_t dim, const std::vector<Symbol>& symbols, const Bindings& values);
// "1024", "B", "4*B*S", "S*S".
std::string dim_str(int64_t dim, const std::vector<Symbol>& symbols);
// "f32[B,1024]".
std::string type_str(const Node& node, const std::vector<Symbol>& symbols);

// `text` (a decision's reason, a plan line) with every number that is a symbolic dim written as
// its terms ("[32749,4096]" -> "[B,4096]"); node ids (%N) are left alone.
std::string symbolize(std::string_view text, const std::vector<Symbol>& symbols);

// The symbols' examples, as Bindings.
Bindings examples(const std::vector<Symbol>& symbols);
// `g` with every dim decoded at `values` (a concrete graph when `values` are plain sizes, or the
// same graph re-encoded when they are other sentinels). Node ids and outputs are kept. Throws
// fusejit::Error when the graph is ill-formed at those values.
Graph instantiate(const Graph& g, const std::vector<Symbol>& symbols, const Bindings& values);

// The values under which `sym` instantiates to exactly `concrete`, or nullopt.
std::optional<Bindings> bind(const SymbolicGraph& sym, const Graph& concrete);

// An input axis that is dynamic: axis `axis` of the k-th input node, a dim named `name` (axes
// with one name are one symbol and must have the same value).
struct DynamicAxis {
  size_t input = 0;
  int64_t axis = 0;
  std::string name;
  bool operator==(const DynamicAxis&) const = default;
};

// `g` with the marked input axes made symbolic, every dim computed from them attributed to their
// symbols (a reshape target, an expand or full of the symbol's value), and the sentinels chosen
// canonically. nullopt, with the reason in `why`, when the result would not instantiate back to
// `g` (a slice of a dynamic axis, a dim that cannot be attributed) or a symbol's value is 1 (an
// extent of 1 broadcasts; it is not a size).
std::optional<SymbolicGraph> generalize(const Graph& g, const std::vector<DynamicAxis>& marks,
                                        std::string* why = nullptr);

// The axes whose extents differ between two traces of one structure (same shape-free hash), as
// marks: axes with the same pair of extents share a symbol, named s0, s1, ... in order of first
// appearance. Empty when the inputs differ in rank or nothing differs.
std::vector<DynamicAxis> differing_axes(const Graph& a, const Graph& b);

// The sentinels for `count` symbols (at most kMaxDynamicDims): the largest primes below 2^15
// that divide none of `coefficients`.
std::vector<int64_t> choose_sentinels(size_t count, const std::vector<int64_t>& coefficients);
// Every prime below 2^15 that divides none of `coefficients`, largest first (the candidates
// choose_sentinels takes the first of).
std::vector<int64_t> sentinel_candidates(const std::vector<int64_t>& coefficients);
// Re-encodes `sym` with the canonical sentinels for its static coefficients (a graph parsed from
// text and one generalized from a trace then encode alike).
SymbolicGraph canonical(SymbolicGraph sym);

}  // namespace fusejit::ir
