// templates/emit: what every kernel template shares: the dtype tables, literals, the kernel
// signature, and the expression printer that turns the region's nodes into CUDA C statements
// at a symbolic index (see index.h).
//
// Dtype differences are data (DTypeCode), and op differences are device functions named after
// the op (fj_add, fj_relu, ... in device/fj_math.cuh, overloaded on the arithmetic type), so
// the printer has one path per op kind, not per dtype.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fusion/plan.h"
#include "templates/index.h"
#include "templates/kernel.h"
#include "templates/printer.h"

namespace fusejit::templates {

// How one dtype lives in memory and in registers.
struct DTypeCode {
  std::string_view storage;  // element type of the buffer
  std::string_view arith;    // type computed in
  std::string_view load;     // storage -> arith ("" when the same)
  std::string_view store;    // arith -> storage ("" when the same)
  std::string_view convert;  // any arith type -> this arith type
  std::string_view round;    // arith value -> the value the dtype can hold ("" when exact)
  std::string_view store_vec;  // V arith values -> V stored elements, packed ("" : per lane)
};
const DTypeCode& dtype_code(DType dtype);

// `fn(x)`, or x when fn is empty.
std::string wrap(std::string_view fn, const std::string& x);

// A value of `dtype` (rounded to it as the reference does) as a literal of its arithmetic
// type; exact and locale-independent (hex floats; non-finite values as bit patterns).
std::string literal(DType dtype, double value);

// Reductions: the accumulator dtype of a reduce node, the combining functor and its identity.
DType accumulator_dtype(const ir::Node& reduce);
std::string_view reduce_functor(ir::Op op);  // "fj_op_sum", ...
std::string reduce_identity(ir::Op op, DType acc);
// The reduce node's value from its reduced accumulator over `count` elements: mean divides,
// and the result is rounded to the node's dtype.
struct RegionInfo;
std::string reduce_finish(const RegionInfo& info, const ir::Node& reduce, const std::string& acc,
                          int64_t count);

// Approximate math a region may use: none, or what the coarsest stored dtype hides
// (docs/numerics.md has each function's error bound).
enum class FastMath { none, f16, bf16 };

// The device function of an elementwise op (device/fj_math.cuh): fj_<op>, or its approximate
// form fj_fast_<op> where `fast` allows it.
std::string device_function(ir::Op op, FastMath fast);

// Region facts the templates share.
struct RegionInfo {
  const ir::Graph& graph;
  const fusion::Region& region;
  std::set<ir::NodeId> inputs;  // leaves: loaded from memory
  std::set<ir::NodeId> nodes;   // computed here
  bool wide_index = false;      // some offset may not fit in int32: index math in 64 bits
  bool round_every_node = false;  // Rounding::node: f16/bf16 nodes rounded where computed
  FastMath fast = FastMath::none;
  Target target;

  RegionInfo(const ir::Graph& g, const fusion::Region& r, const CodegenOptions& options);
  const ir::Node& node(ir::NodeId id) const { return graph.node(id); }
  // Parameter names: in<k> for region.inputs[k], out<k> for region.outputs[k].
  std::string input_param(ir::NodeId id) const;
  // Smallest element size among the leaves and outputs (the vector width follows from it).
  int min_element_size() const { return element_sizes().first; }
  // The largest (what a thread's share of a row costs in registers and bytes in flight).
  int max_element_size() const { return element_sizes().second; }
  std::pair<int, int> element_sizes() const;
  std::string_view index_type() const { return wide_index ? "long long" : "int"; }
};

// `extern "C" __global__ void __launch_bounds__(block[, min_blocks]) NAME(const float* __restrict__
// in0, ...)` ending in `{`, after which the printer is one level deeper (close() ends the
// function). The name is the placeholder kKernelNameToken.
inline constexpr std::string_view kKernelNameToken = "FJ_KERNEL_NAME";
void print_signature(Printer& p, const RegionInfo& info, int block, int min_blocks = 0);

// Variables visible at a point of the kernel, innermost scope first: the memo of values
// already computed there, so that each (node, element) is computed once per scope.
struct Scope {
  Printer* out = nullptr;
  Scope* parent = nullptr;
  std::map<std::string, std::string> memo;

  std::optional<std::string> find(const std::string& key) const;
};

// Prints the statements computing a node's value at an index, recursively through the
// region, and returns the variable (or literal) holding it, in the node's arithmetic type.
// The kernel template decides, through the two hooks, where region inputs come from (plain
// loads, hoisted loads, vector preloads) and which values it already holds.
class ExprEmitter {
 public:
  using LeafFn = std::function<std::string(ir::NodeId, const Index&, Scope&)>;
  // Asked first for every node: a value the template already holds (a
  // reduction's result, a register cache), or nullopt to compute the node.
  using InterceptFn = std::function<std::optional<std::string>(ir::NodeId, const Index&)>;

  ExprEmitter(const RegionInfo& info, LeafFn leaf, InterceptFn intercept);

  std::string value(ir::NodeId id, const Index& at, Scope& scope);
  // A fresh variable name: prefix plus a number (a prefix ending in a digit first stands alone).
  std::string fresh(std::string_view prefix);
  // The memo key of (node, element).
  static std::string key(ir::NodeId id, const Index& at);

 private:
  std::string elementwise(ir::NodeId id, const Index& at, Scope& scope);

  const RegionInfo& info_;
  LeafFn leaf_;
  InterceptFn intercept_;
  std::map<std::string, int> counters_;
};

// `value` (in the arithmetic type of `from`) converted to the arithmetic type of `to`.
std::string convert(DType to, DType from, const std::string& value);

// A V-lane vector store of `value` (one lane's value, in the dtype's arithmetic type) to
// `dst` (an aligned pointer expression): the lanes' values are collected in `array`, declared
// in `decl`, set in `body` (inside the lane loop) and stored in `stores`.
void print_vector_store(Printer& decl, Printer& body, Printer& stores, DType dtype,
                        const std::string& array, const std::string& dst, int v,
                        const std::string& value);

// The expression loading element `offset` of a region input, converted to its arithmetic type.
std::string load_expr(const RegionInfo& info, ir::NodeId id, const std::string& offset);

// Vector width: elements per thread per access, so that the narrowest buffer moves 16 bytes
// (at most 8 elements); 1 when vectorizing is off. Then the largest power of two not above it
// that divides every extent in `divides`.
int vector_width(const RegionInfo& info, bool vectorize, const std::vector<int64_t>& divides);
// The same for one buffer of `element_size`-byte elements.
int vector_width(int element_size, bool vectorize, const std::vector<int64_t>& divides);

}  // namespace fusejit::templates
