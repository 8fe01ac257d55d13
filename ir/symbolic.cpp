// ir/symbolic: dynamic dims; see symbolic.h.
#include "ir/symbolic.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/rebuild.h"
#include "ir/shape.h"

namespace fusejit::ir {

namespace {

// Sentinels come from the primes just below 2^15: small enough that a dim of three symbols
// times a large static coefficient still fits in 64 bits, large enough that planning treats a
// symbolic extent as a large one.
constexpr int64_t kSentinelCeiling = 1 << 15;

bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}

// a * b for a dim; a product that overflows is a usage error.
int64_t dim_product(int64_t a, int64_t b) {
  const std::optional<int64_t> r = checked_mul(a, b);
  if (!r) {
    throw UsageError(fmt::format("dynamic dims: a dim of {} * {} overflows 64 bits; use fewer "
                                 "dynamic dims or smaller sizes",
                                 a, b));
  }
  return *r;
}

bool uses_shape(Op op) {
  switch (op) {
    case Op::input:
    case Op::reshape:
    case Op::expand:
    case Op::slice:
    case Op::arange:
    case Op::rand:
    case Op::randn:
      return true;
    default:
      return false;
  }
}

// What generalize knows while it encodes: the symbols, their values, and the graph so far.
struct Attribution {
  const std::vector<Symbol>& symbols;
  const Bindings& values;

  // A dim that was given as a number (an expand, a full, an arange of the symbol's value): the
  // symbol of that value, if any; a static dim otherwise.
  int64_t free_dim(int64_t value) const {
    for (size_t k = 0; k < symbols.size(); ++k) {
      if (value == values[k] && value != 1) return symbols[k].sentinel;
    }
    return value;
  }

  Shape free_shape(const Shape& concrete) const {
    Shape s;
    for (int64_t d : concrete) s.push_back(free_dim(d));
    return s;
  }

  Shape expand(const Shape& encoded, const Shape& operand, const Shape& target) const {
    Shape s(target.size());
    const size_t lead = target.size() - operand.size();
    for (size_t j = 0; j < target.size(); ++j) {
      const bool kept = j >= lead && operand[j - lead] == target[j];
      s[j] = kept ? encoded[j - lead] : free_dim(target[j]);
    }
    return s;
  }

  // Gives the symbols of one reshape group (operand axes [i0, i1), result axes [j0, j1), equal
  // extents) to the result axes: each symbol, in operand order, to the first result axis from
  // the last one given whose remaining extent it divides.
  bool reshape_group(const Shape& encoded, size_t i0, size_t i1, const Shape& target, size_t j0,
                     size_t j1, Shape& out) const {
    std::vector<int64_t> rest(target.begin() + static_cast<std::ptrdiff_t>(j0),
                              target.begin() + static_cast<std::ptrdiff_t>(j1));
    std::vector<int64_t> sentinels(rest.size(), 1);
    size_t cursor = 0;
    for (size_t i = i0; i < i1; ++i) {
      const DimTerms t = dim_terms(encoded[i], symbols);
      for (size_t k = 0; k < symbols.size(); ++k) {
        for (int e = 0; e < t.exponents[k]; ++e) {
          while (cursor < rest.size() && rest[cursor] % values[k] != 0) ++cursor;
          if (cursor == rest.size()) return false;
          rest[cursor] /= values[k];
          sentinels[cursor] = dim_product(sentinels[cursor], symbols[k].sentinel);
        }
      }
    }
    for (size_t j = 0; j < rest.size(); ++j) out[j0 + j] = dim_product(rest[j], sentinels[j]);
    return true;
  }

  // The result dims of a reshape of `operand` (encoded as `encoded`) to `target`, grouped into
  // runs of equal extent; nullopt when a group's symbols cannot be placed.
  std::optional<Shape> reshape(const Shape& encoded, const Shape& operand,
                               const Shape& target) const {
    Shape out(target.size(), 1);
    size_t i = 0, j = 0;
    while (i < operand.size() || j < target.size()) {
      const size_t i0 = i, j0 = j;
      int64_t pi = 1, pj = 1;
      do {
        if ((pi <= pj || j == target.size()) && i < operand.size()) {
          pi *= operand[i++];
        } else if (j < target.size()) {
          pj *= target[j++];
        } else {
          return std::nullopt;  // numel differs: inference will say so
        }
      } while (pi != pj || i == i0 || j == j0);
      if (!reshape_group(encoded, i0, i, target, j0, j, out)) return std::nullopt;
    }
    return out;
  }
};

void set_why(std::string* why, std::string text) {
  if (why) *why = std::move(text);
}

// The symbols the marks name, with their values in `g`; nullopt (and why) when inconsistent.
std::optional<std::pair<std::vector<Symbol>, Bindings>> mark_symbols(
    const Graph& g, const std::vector<DynamicAxis>& marks, std::string* why) {
  const std::vector<NodeId> inputs = g.inputs();
  std::vector<Symbol> symbols;
  Bindings values;
  for (const DynamicAxis& m : marks) {
    if (m.input >= inputs.size() || m.axis < 0 ||
        m.axis >= static_cast<int64_t>(g.node(inputs[m.input]).shape.size())) {
      set_why(why, fmt::format("input {} has no axis {}", m.input, m.axis));
      return std::nullopt;
    }
    const int64_t value = g.node(inputs[m.input]).shape[static_cast<size_t>(m.axis)];
    const auto it = std::find_if(symbols.begin(), symbols.end(),
                                 [&](const Symbol& s) { return s.name == m.name; });
    if (it == symbols.end()) {
      symbols.push_back({.name = m.name, .sentinel = 0, .example = value});
      values.push_back(value);
    } else if (it->example != value) {
      set_why(why, fmt::format("dim {} is {} on one input and {} on another", m.name,
                               it->example, value));
      return std::nullopt;
    }
  }
  if (symbols.size() > kMaxDynamicDims) {
    set_why(why, fmt::format("{} dynamic dims; at most {} are supported", symbols.size(),
                             kMaxDynamicDims));
    return std::nullopt;
  }
  for (size_t k = 0; k < symbols.size(); ++k) {
    if (values[k] == 1) {
      set_why(why, fmt::format("dim {} is 1, which broadcasts; it cannot stand for a size",
                               symbols[k].name));
      return std::nullopt;
    }
  }
  return std::pair{std::move(symbols), std::move(values)};
}

// The encoded result shape of node `id` of `g`, given the graph encoded so far.
std::optional<Shape> encoded_shape(const Graph& g, NodeId id, const Graph& out,
                                   const Attribution& at, const std::vector<DynamicAxis>& marks,
                                   size_t input_position) {
  const Node& n = g.node(id);
  switch (n.op) {
    case Op::input: {
      Shape s = n.shape;
      for (const DynamicAxis& m : marks) {
        if (m.input != input_position) continue;
        for (size_t k = 0; k < at.symbols.size(); ++k) {
          if (at.symbols[k].name == m.name) s[static_cast<size_t>(m.axis)] = at.symbols[k].sentinel;
        }
      }
      return s;
    }
    case Op::reshape:
      return at.reshape(out.node(n.inputs[0]).shape, g.node(n.inputs[0]).shape, n.shape);
    case Op::expand:
      return at.expand(out.node(n.inputs[0]).shape, g.node(n.inputs[0]).shape, n.shape);
    case Op::slice: {
      Shape s = out.node(n.inputs[0]).shape;
      const size_t axis = static_cast<size_t>(n.axes[0]);
      if (s[axis] != g.node(n.inputs[0]).shape[axis]) return std::nullopt;  // a dynamic axis
      s[axis] = n.shape[axis];
      return s;
    }
    default:
      return at.free_shape(n.shape);
  }
}

}  // namespace

bool SymbolicGraph::operator==(const SymbolicGraph& o) const {
  if (graph != o.graph || symbols.size() != o.symbols.size()) return false;
  for (size_t k = 0; k < symbols.size(); ++k) {
    if (symbols[k].name != o.symbols[k].name || symbols[k].sentinel != o.symbols[k].sentinel) {
      return false;
    }
  }
  return true;
}

bool DimTerms::symbolic() const {
  return std::any_of(exponents.begin(), exponents.end(), [](int e) { return e > 0; });
}

DimTerms dim_terms(int64_t dim, const std::vector<Symbol>& symbols) {
  DimTerms t;
  t.exponents.assign(symbols.size(), 0);
  for (size_t k = 0; k < symbols.size(); ++k) {
    const int64_t p = symbols[k].sentinel;
    while (p > 1 && dim != 0 && dim % p == 0) {
      dim /= p;
      ++t.exponents[k];
    }
  }
  t.coefficient = dim;
  return t;
}

int64_t DimTerms::value(const Bindings& values) const {
  int64_t v = coefficient;
  for (size_t k = 0; k < exponents.size(); ++k) {
    for (int e = 0; e < exponents[k]; ++e) v = dim_product(v, values.at(k));
  }
  return v;
}

int64_t dim_value(int64_t dim, const std::vector<Symbol>& symbols, const Bindings& values) {
  return dim_terms(dim, symbols).value(values);
}

std::string dim_str(int64_t dim, const std::vector<Symbol>& symbols) {
  const DimTerms t = dim_terms(dim, symbols);
  std::string s = t.symbolic() && t.coefficient == 1 ? "" : std::to_string(t.coefficient);
  for (size_t k = 0; k < symbols.size(); ++k) {
    for (int e = 0; e < t.exponents[k]; ++e) {
      if (!s.empty()) s += '*';
      s += symbols[k].name;
    }
  }
  return s;
}

std::string type_str(const Node& node, const std::vector<Symbol>& symbols) {
  std::string s = fmt::format("{}[", dtype_name(node.dtype));
  for (size_t i = 0; i < node.shape.size(); ++i) {
    if (i > 0) s += ',';
    s += dim_str(node.shape[i], symbols);
  }
  return s + "]";
}

std::string symbolize(std::string_view text, const std::vector<Symbol>& symbols) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const bool digit = text[i] >= '0' && text[i] <= '9';
    if (!digit || (i > 0 && (text[i - 1] == '%' || std::isalnum(static_cast<unsigned char>(
                                                      text[i - 1]))))) {
      out += text[i++];
      continue;
    }
    size_t j = i;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data() + i, text.data() + j, v);
    const bool symbolic = ec == std::errc() && v > 0 && dim_terms(v, symbols).symbolic();
    out += symbolic ? dim_str(v, symbols) : std::string(text.substr(i, j - i));
    i = j;
  }
  return out;
}

Bindings examples(const std::vector<Symbol>& symbols) {
  Bindings b;
  for (const Symbol& s : symbols) b.push_back(s.example);
  return b;
}

Graph instantiate(const Graph& g, const std::vector<Symbol>& symbols, const Bindings& values) {
  if (values.size() != symbols.size()) {
    throw InternalError(fmt::format("instantiate: {} values for {} symbols", values.size(),
                                    symbols.size()));
  }
  auto step = [&](NodeId, NodeSpec spec, Graph& out) {
    if (uses_shape(spec.op)) {
      for (int64_t& d : spec.shape) d = dim_value(d, symbols, values);
    }
    return out.add(std::move(spec));
  };
  return rebuild(g, step).graph;
}

std::optional<Bindings> bind(const SymbolicGraph& sym, const Graph& concrete) {
  const std::vector<NodeId> a = sym.graph.inputs(), b = concrete.inputs();
  if (a.size() != b.size() || sym.graph.size() != concrete.size()) return std::nullopt;
  Bindings values(sym.symbols.size(), 0);
  for (size_t k = 0; k < a.size(); ++k) {
    const Shape& s = sym.graph.node(a[k]).shape;
    const Shape& c = concrete.node(b[k]).shape;
    if (s.size() != c.size()) return std::nullopt;
    for (size_t i = 0; i < s.size(); ++i) {
      const DimTerms t = dim_terms(s[i], sym.symbols);
      // Only a plain c * s solves for s; other dims are checked by instantiating.
      const auto one = std::find(t.exponents.begin(), t.exponents.end(), 1);
      const bool plain = one != t.exponents.end() &&
                         std::count(t.exponents.begin(), t.exponents.end(), 0) + 1 ==
                             static_cast<std::ptrdiff_t>(t.exponents.size());
      if (!plain || c[i] % t.coefficient != 0) continue;
      int64_t& v = values[static_cast<size_t>(one - t.exponents.begin())];
      const int64_t value = c[i] / t.coefficient;
      if (v != 0 && v != value) return std::nullopt;
      v = value;
    }
  }
  if (std::find(values.begin(), values.end(), 0) != values.end()) return std::nullopt;
  try {
    if (instantiate(sym.graph, sym.symbols, values) == concrete) return values;
  } catch (const Error&) {
  }
  return std::nullopt;
}

std::optional<SymbolicGraph> generalize(const Graph& g, const std::vector<DynamicAxis>& marks,
                                        std::string* why) {
  auto marked = mark_symbols(g, marks, why);
  if (!marked) return std::nullopt;
  auto& [symbols, values] = *marked;
  std::vector<int64_t> dims;
  for (const Node& n : g.nodes()) dims.insert(dims.end(), n.shape.begin(), n.shape.end());
  const std::vector<int64_t> primes = choose_sentinels(symbols.size(), dims);
  for (size_t k = 0; k < symbols.size(); ++k) symbols[k].sentinel = primes[k];

  const Attribution at{symbols, values};
  SymbolicGraph sym{.graph = {}, .symbols = symbols};
  try {
    size_t input_position = 0;
    auto step = [&](NodeId id, NodeSpec spec, Graph& out) {
      if (uses_shape(spec.op)) {
        auto s = encoded_shape(g, id, out, at, marks, input_position);
        if (!s) {
          throw UsageError(fmt::format("%{} ({}) cannot be expressed in the dynamic dims", id,
                                       op_name(spec.op)));
        }
        spec.shape = std::move(*s);
      }
      if (spec.op == Op::input) ++input_position;
      return out.add(std::move(spec));
    };
    sym.graph = rebuild(g, step).graph;
    if (instantiate(sym.graph, symbols, values) != g) {
      set_why(why, "the dynamic trace does not give back the recorded one");
      return std::nullopt;
    }
  } catch (const Error& e) {
    set_why(why, e.what());
    return std::nullopt;
  }
  return canonical(std::move(sym));
}

std::vector<DynamicAxis> differing_axes(const Graph& a, const Graph& b) {
  const std::vector<NodeId> ia = a.inputs(), ib = b.inputs();
  if (ia.size() != ib.size()) return {};
  std::vector<DynamicAxis> marks;
  std::map<std::pair<int64_t, int64_t>, std::string> names;
  for (size_t k = 0; k < ia.size(); ++k) {
    const Shape& sa = a.node(ia[k]).shape;
    const Shape& sb = b.node(ib[k]).shape;
    if (sa.size() != sb.size()) return {};
    for (size_t i = 0; i < sa.size(); ++i) {
      if (sa[i] == sb[i]) continue;
      auto [it, fresh] = names.try_emplace({sa[i], sb[i]}, fmt::format("s{}", names.size()));
      marks.push_back({.input = k, .axis = static_cast<int64_t>(i), .name = it->second});
    }
  }
  return marks;
}

namespace {

// The largest `count` primes below 2^15 that divide none of `coefficients` (fewer if there are
// not that many).
std::vector<int64_t> sentinels_up_to(size_t count, const std::vector<int64_t>& coefficients) {
  std::vector<int64_t> primes;
  for (int64_t p = kSentinelCeiling - 1; primes.size() < count && p > 2; --p) {
    if (!is_prime(p)) continue;
    const bool divides = std::any_of(coefficients.begin(), coefficients.end(),
                                     [p](int64_t c) { return c != 0 && c % p == 0; });
    if (!divides) primes.push_back(p);
  }
  return primes;
}

}  // namespace

std::vector<int64_t> choose_sentinels(size_t count, const std::vector<int64_t>& coefficients) {
  if (count > kMaxDynamicDims) {
    throw InternalError(fmt::format("choose_sentinels: {} dynamic dims, more than the {} a graph "
                                    "may have (the parser and generalize refuse more)",
                                    count, kMaxDynamicDims));
  }
  return sentinels_up_to(count, coefficients);
}

std::vector<int64_t> sentinel_candidates(const std::vector<int64_t>& coefficients) {
  return sentinels_up_to(SIZE_MAX, coefficients);
}

SymbolicGraph canonical(SymbolicGraph sym) {
  if (sym.symbols.empty()) return sym;
  std::vector<int64_t> coefficients;
  for (const Node& n : sym.graph.nodes()) {
    for (int64_t d : n.shape) coefficients.push_back(dim_terms(d, sym.symbols).coefficient);
  }
  const std::vector<int64_t> primes = choose_sentinels(sym.symbols.size(), coefficients);
  bool same = true;
  for (size_t k = 0; k < primes.size(); ++k) same = same && primes[k] == sym.symbols[k].sentinel;
  if (same) return sym;
  Graph graph = instantiate(sym.graph, sym.symbols, primes);
  for (size_t k = 0; k < primes.size(); ++k) sym.symbols[k].sentinel = primes[k];
  sym.graph = std::move(graph);
  return sym;
}

}  // namespace fusejit::ir
