// ir/hash: the structural hash; see hash.h.
//
// Merkle style: a node's hash mixes its own fields (op, dtype, shape, axes, keepdim, constant
// bits, a slice's start and step) with the hashes of its operands in operand order, so ids never
// enter it, only the shape of the dataflow. An input node has no operands; it mixes in its
// position among the inputs instead (the k-th input binds the k-th buffer), which is what tells
// two inputs apart. The graph hash mixes the output hashes in output order, so only nodes that
// reach an output count. A random op's seed and offset are data (its key operand, an input):
// every seed hashes alike, and two draws from different key inputs hash apart.
//
// Everything is fixed-width integer arithmetic on values, never std::hash or addresses, so the
// hash is the same across runs, builds and platforms.
#include "ir/hash.h"

#include <array>
#include <bit>
#include <cmath>
#include <string_view>
#include <vector>

namespace fusejit::ir {

namespace {

// The splitmix64 finalizer: a bijection on 64 bits with full avalanche.
constexpr uint64_t finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// 64 x 64 -> 128-bit multiply, the two halves folded by xor: one multiply instruction that
// spreads every input bit over the whole result.
constexpr uint64_t fold_multiply(uint64_t a, uint64_t b) {
  __extension__ using u128 = unsigned __int128;
  const u128 product = static_cast<u128>(a) * b;
  return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
}

// An order-sensitive accumulator: add(a); add(b) differs from add(b); add(a). Each add is one
// folded multiply (a few instructions: a node is hashed on every recorded op, so this is on
// the recording hot path); value() finishes with the splitmix64 finalizer, so a node's hash,
// which its users mix in turn, has full avalanche.
class Mixer {
 public:
  constexpr explicit Mixer(uint64_t seed) : state_(finalize(seed)) {}
  // Carries on from `state()` of an earlier Mixer.
  static constexpr Mixer resume(uint64_t state) {
    Mixer m(0);
    m.state_ = state;
    return m;
  }
  constexpr void add(uint64_t v) {
    state_ = fold_multiply(state_ ^ v ^ 0x243f6a8885a308d3ull, 0x9e3779b97f4a7c15ull);
  }
  // Lists carry their length, so [1,2],[3] and [1],[2,3] differ.
  template <class T>
  void add_list(const std::vector<T>& values) {
    add(values.size());
    for (const T& v : values) add(static_cast<uint64_t>(v));
  }
  constexpr uint64_t state() const { return state_; }
  constexpr uint64_t value() const { return finalize(state_); }

 private:
  uint64_t state_;
};

// Distinct seeds keep a node's hash and the graph's hash in separate domains.
constexpr uint64_t kNodeSeed = 0x66757365'6a69746eull;   // "fusejitn"
constexpr uint64_t kGraphSeed = 0x66757365'6a697467ull;  // "fusejitg"

uint64_t value_bits(double v) {
  // Every NaN prints as "nan" and parses back as one NaN, so all NaNs hash alike. -0.0 and 0.0
  // stay distinct: 1/x tells them apart.
  if (std::isnan(v)) return 0x7ff8000000000000ull;
  return std::bit_cast<uint64_t>(v);
}

// An op enters by its name, not its position in the op table, so that adding ops to the table
// leaves the hashes of existing traces (and the names of recorded trace files) as they are.
constexpr uint64_t name_bits(std::string_view name) { return fnv1a64(name); }

// Per op and dtype, a node's Mixer once the seed, the op's name and the dtype are in: the same
// for every such node, so worked out at compile time (it is most of what hashing a small node
// costs).
constexpr std::array<std::array<uint64_t, kNumDTypes>, kNumOps> kPrefix = [] {
  std::array<std::array<uint64_t, kNumDTypes>, kNumOps> prefix{};
  for (int op = 0; op < kNumOps; ++op) {
    for (int dtype = 0; dtype < kNumDTypes; ++dtype) {
      Mixer m(kNodeSeed);
      m.add(name_bits(op_name(static_cast<Op>(op))));
      m.add(static_cast<uint64_t>(dtype));
      prefix[static_cast<size_t>(op)][static_cast<size_t>(dtype)] = m.state();
    }
  }
  return prefix;
}();

}  // namespace

uint64_t node_hash(const Node& n, std::span<const uint64_t> earlier, uint64_t input_position) {
  Mixer m = Mixer::resume(kPrefix[static_cast<size_t>(n.op)][static_cast<size_t>(n.dtype)]);
  m.add_list(n.shape);
  m.add_list(n.axes);
  m.add(n.keepdim ? 1 : 0);
  m.add(n.op == Op::constant ? value_bits(n.value) : 0);
  // An integer constant's double is exact up to 2^53; past it, the exact value tells apart
  // constants with one double (only there, so that other hashes stay as they were).
  constexpr int64_t kExactInDouble = int64_t{1} << 53;
  if (n.op == Op::constant && (n.integer > kExactInDouble || n.integer < -kExactInDouble)) {
    m.add(static_cast<uint64_t>(n.integer));
  }
  if (n.op == Op::slice) {  // only here, so that the hashes of other nodes stay as they were
    m.add(static_cast<uint64_t>(n.start));
    m.add(static_cast<uint64_t>(n.step));
  }
  if (n.op == Op::input) m.add(input_position);
  m.add(n.inputs.size());
  // Operands always precede their node in a valid graph; verify() checks that.
  for (NodeId id : n.inputs) m.add(earlier[static_cast<size_t>(id)]);
  return m.value();
}

namespace {

uint64_t graph_hash(const Graph& g, std::span<const uint64_t> node_hashes) {
  Mixer graph(kGraphSeed);
  graph.add(g.outputs().size());
  for (NodeId id : g.outputs()) graph.add(node_hashes[static_cast<size_t>(id)]);
  return graph.value();
}

}  // namespace

uint64_t structural_hash(const Graph& g) { return graph_hash(g, g.node_hashes()); }

uint64_t recompute_structural_hash(const Graph& g) {
  std::vector<uint64_t> hashes(g.size());
  uint64_t input_position = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    hashes[i] = node_hash(n, std::span(hashes).first(i), n.op == Op::input ? input_position++ : 0);
  }
  return graph_hash(g, hashes);
}

uint64_t shape_free_hash(const Graph& g) {
  std::vector<uint64_t> hashes(g.size());
  uint64_t input_position = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    Node n = g.nodes()[i];
    n.shape.assign(n.shape.size(), 0);  // the rank stays, the extents go
    hashes[i] = node_hash(n, std::span(hashes).first(i), n.op == Op::input ? input_position++ : 0);
  }
  return graph_hash(g, hashes);
}

}  // namespace fusejit::ir
