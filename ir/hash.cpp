// ir/hash: the structural hash; see hash.h.
//
// Merkle style: a node's hash is XXH3 (ir/digest.h) over its own fields (op, dtype, shape, axes,
// keepdim, constant bits, a slice's start and step) and the hashes of its operands in operand
// order, so ids never enter it, only the shape of the dataflow. An input node has no operands;
// it adds its position among the inputs instead (the k-th input binds the k-th buffer), which is
// what tells two inputs apart. The graph hash is XXH3 over the output hashes in output order, so
// only nodes that reach an output count. A random op's seed and offset are data (its key
// operand, an input): every seed hashes alike, and two draws from different key inputs hash
// apart.
//
// Every field enters as little-endian bytes of a fixed width, never std::hash or addresses, so
// the hash is the same across runs, builds and platforms.
#include "ir/hash.h"

#include <array>
#include <bit>
#include <cmath>
#include <vector>

#include "ir/digest.h"

namespace fusejit::ir {

namespace {

// A first word that keeps a node's hash and the graph's hash in separate domains.
constexpr uint64_t kNodeDomain = 0x66757365'6a69746eull;   // "fusejitn"
constexpr uint64_t kGraphDomain = 0x66757365'6a697467ull;  // "fusejitg"

// Fields as little-endian 64-bit words, hashed by one XXH3 call. A node is hashed on every
// recorded op, and one-shot XXH3 over its dozen words costs a fraction of feeding them to a
// streaming state one by one. A node with more words than fit (a wide concat) chains: the full
// buffer's hash becomes the first word of the next. Nothing is allocated.
class Words {
 public:
  explicit Words(uint64_t domain) { add(domain); }
  void add(uint64_t v) {
    if (size_ == words_.size()) {
      words_[0] = little_endian(hash());
      size_ = 1;
    }
    words_[size_++] = little_endian(v);
  }
  // Lists carry their length, so [1,2],[3] and [1],[2,3] differ.
  template <class T>
  void add_list(const std::vector<T>& values) {
    add(values.size());
    for (const T& v : values) add(static_cast<uint64_t>(v));
  }
  uint64_t hash() const { return hash64(words_.data(), size_ * sizeof(uint64_t)); }

 private:
  static uint64_t little_endian(uint64_t v) {
    if constexpr (std::endian::native == std::endian::big) {
      uint64_t swapped = 0;
      for (int i = 0; i < 8; ++i) swapped = (swapped << 8) | ((v >> (8 * i)) & 0xff);
      return swapped;
    }
    return v;
  }

  std::array<uint64_t, 24> words_;  // 192 bytes: XXH3's short-input path
  size_t size_ = 0;
};

uint64_t value_bits(double v) {
  // Every NaN prints as "nan" and parses back as one NaN, so all NaNs hash alike. -0.0 and 0.0
  // stay distinct: 1/x tells them apart.
  if (std::isnan(v)) return 0x7ff8000000000000ull;
  return std::bit_cast<uint64_t>(v);
}

}  // namespace

uint64_t node_hash(const Node& n, std::span<const uint64_t> earlier, uint64_t input_position) {
  Words w(kNodeDomain);
  // An op enters by its name, not its position in the op table, so that adding ops to the table
  // leaves the hashes of existing traces (and the names of recorded trace files) as they are.
  w.add(hash64(op_name(n.op)));
  w.add(static_cast<uint64_t>(n.dtype));
  w.add_list(n.shape);
  w.add_list(n.axes);
  w.add(n.keepdim ? 1 : 0);
  w.add(n.op == Op::constant ? value_bits(n.value) : 0);
  // An integer constant's double is exact up to 2^53; past it, the exact value tells apart
  // constants with one double.
  constexpr int64_t kExactInDouble = int64_t{1} << 53;
  if (n.op == Op::constant && (n.integer > kExactInDouble || n.integer < -kExactInDouble)) {
    w.add(static_cast<uint64_t>(n.integer));
  }
  if (n.op == Op::slice) {  // other ops leave start and step at their defaults
    w.add(static_cast<uint64_t>(n.start));
    w.add(static_cast<uint64_t>(n.step));
  }
  if (n.op == Op::input) w.add(input_position);
  w.add(n.inputs.size());
  // Operands always precede their node in a valid graph; verify() checks that.
  for (NodeId id : n.inputs) w.add(earlier[static_cast<size_t>(id)]);
  return w.hash();
}

namespace {

uint64_t graph_hash(const Graph& g, std::span<const uint64_t> node_hashes) {
  Words w(kGraphDomain);
  w.add(g.outputs().size());
  for (NodeId id : g.outputs()) w.add(node_hashes[static_cast<size_t>(id)]);
  return w.hash();
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
