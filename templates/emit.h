// templates/emit: the facts every kernel template shares: the dtype tables, literals, the
// device function of each op, the region's facts (RegionInfo) and vector widths. Node values
// are lowered to kernel IR by templates/lower.h.
//
// Dtype differences are data (DTypeCode), and op differences are device functions named after
// the op (fj_add, fj_relu, ... in device/fj_math.cuh, overloaded on the arithmetic type), so
// lowering has one path per op kind, not per dtype.
#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fusion/plan.h"
#include "templates/kir/index.h"
#include "templates/kernel.h"

namespace fusejit::templates {

// How one dtype lives in memory and in registers.
struct DTypeCode {
  std::string_view storage;    // element type of the buffer
  std::string_view arith;      // type computed in
  std::string_view load;       // storage -> arith ("" when the same)
  std::string_view store;      // arith -> storage ("" when the same)
  std::string_view convert;    // any arith type -> this arith type
  std::string_view round;      // arith value -> the value the dtype can hold ("" when exact)
  std::string_view store_vec;  // V arith values -> V stored elements, packed ("" : per lane)
};
const DTypeCode& dtype_code(DType dtype);

// A value of `dtype` (rounded to it as the reference does) as a literal of its arithmetic
// type; exact and locale-independent (hex floats; non-finite values as bit patterns).
std::string literal(DType dtype, double value);
// An integral or bool value (wrapped to i32, != 0 for bool) as an exact literal.
std::string integer_literal(DType dtype, int64_t value);
// A constant node's value as a literal: integers exactly, from Node::integer.
std::string constant_literal(const ir::Node& constant);

// Reductions: the accumulator dtype of a reduce node, the combining functor and its identity.
DType accumulator_dtype(const ir::Node& reduce);
std::string_view reduce_functor(ir::Op op);  // "fj_op_sum", ...
std::string reduce_identity(ir::Op op, DType acc);

// Approximate math a region may use: none, or what the coarsest stored dtype hides
// (docs/numerics.md has each function's error bound).
enum class FastMath { none, f16, bf16 };

// The device function of an elementwise op (device/fj_math.cuh): fj_<op>, or its approximate
// form fj_fast_<op> where `fast` allows it.
std::string device_function(ir::Op op, FastMath fast);

// The kernel's name in a template's output, until generate() names it after the source's hash.
inline constexpr std::string_view kKernelNameToken = "FJ_KERNEL_NAME";

// Index math fits in int32 when every extent does, with room for a grid stride past the end:
// loop variables stay below 2 * 2^30.
inline constexpr int64_t kNarrowIndexLimit = int64_t{1} << 30;

// Region facts the templates share.
struct RegionInfo {
  const ir::Graph& graph;
  const fusion::Region& region;
  std::set<ir::NodeId> inputs;    // leaves: loaded from memory
  std::set<ir::NodeId> nodes;     // computed here
  // Leaves read only as a draw's key (rand, randn): two words per thread, not a stream of
  // elements, so they count in no element size.
  std::set<ir::NodeId> keys;
  bool wide_index = false;        // some offset may not fit in int32: index math in 64 bits
  bool round_every_node = false;  // Rounding::node: f16/bf16 nodes rounded where computed
  FastMath fast = FastMath::none;
  Target target;
  bool stage_rows = false;  // CodegenOptions::stage_rows
  // A multi-pass row kernel whose row length is given at launch: 0, the looped kernel, which
  // serves every length; k >= 1, its k-th register path (bounded_row_configs), which serves
  // rows up to a bound (DynamicSizes::row_path).
  int row_path = 0;

  RegionInfo(const ir::Graph& g, const fusion::Region& r, const CodegenOptions& options);
  // Dynamic kernels (generate_dynamic): the graph is one instantiation of a symbolic region at
  // `sizes` (the symbols' values: distinct primes, or alignments times them, that divide no
  // static extent), and the region's outer extent and the counts that change with the symbols
  // are parameters of the kernel: fj_outer and the runtime extents (templates/kir/fastdiv.h).
  // Their values here are only an instance; the accessors below hand out what holds at every
  // size and refuse (NotSizeIndependent, naming what asked) what does not. `sizes` must
  // outlive this RegionInfo.
  void make_dynamic(const DynamicSizes& sizes);
  bool dynamic() const { return sizes_ != nullptr; }
  // Whether `count` changes with the symbols (a symbol's value divides it): a dynamic kernel
  // takes it at launch (kir::extent, index arithmetic), never as a constant.
  bool symbolic(int64_t count) const;
  // `count` (a sweep's elements, a reduction's rows) per unit of the outer extent: count itself
  // in a static kernel; in a dynamic one, throws NotSizeIndependent (naming `what`) unless the
  // outer extent divides it and the quotient is a fixed number (the same at every size).
  int64_t per_outer(int64_t count, std::string_view what) const;
  // Whether per_outer takes `count` (always, in a static kernel).
  bool fixed_per_outer(int64_t count) const;
  // `count` as a constant the kernel may be built on (an unrolled count, a grid, a schedule's
  // choice); in a dynamic kernel, throws NotSizeIndependent (naming `what`) where it changes
  // with the symbols.
  int64_t fixed_extent(int64_t count, std::string_view what) const;
  // The node's dtype and shape, e.g. "f32[?,1024]" (in a dynamic kernel, dims that change with
  // the symbols as "?").
  std::string type_str(ir::NodeId id) const;
  const ir::Node& node(ir::NodeId id) const { return graph.node(id); }
  // The kernel's parameters, as the variables kernel_function (lower.h) declares: in<k> for
  // region.inputs[k], out<k> for region.outputs[k], and a dynamic kernel's outer extent
  // fj_outer. Throws InternalError for a node that is not a region input.
  const VarP& input_var(ir::NodeId id) const;
  const VarP& output_var(size_t k) const { return output_vars_.at(k); }
  const VarP& outer_var() const { return outer_var_; }
  // The generated source names a node by its place in the region, never by its node id: its
  // value is in<k> when it is region.inputs[k] and v<k> when it is region.nodes[k] (value_name),
  // and what a template keeps per node (a reduction's accumulator a<k>, its scratch
  // fj_partial<k>, ...) is `prefix` followed by that k (named). So structurally equal regions
  // print the same source, and share one compiled kernel, wherever they sit in a trace (the
  // pieces of a split concat). Throws InternalError for a node of neither list.
  std::string value_name(ir::NodeId id) const;
  std::string named(std::string_view prefix, ir::NodeId id) const;
  // Smallest element size among the leaves (but keys) and outputs (the vector width follows
  // from it).
  int min_element_size() const { return element_sizes().first; }
  // The largest (what a thread's share of a row costs in registers and bytes in flight).
  int max_element_size() const { return element_sizes().second; }
  std::pair<int, int> element_sizes() const;
  std::string_view index_type() const { return wide_index ? "long long" : "int"; }

 private:
  std::map<ir::NodeId, size_t> input_position_;  // id -> k of region.inputs[k]
  std::map<ir::NodeId, size_t> node_position_;   // id -> k of region.nodes[k]
  std::vector<VarP> input_vars_, output_vars_;   // in<k>, out<k>
  VarP outer_var_;                               // fj_outer
  const DynamicSizes* sizes_ = nullptr;          // a dynamic kernel's instance (make_dynamic)
};

// Thrown where a dynamic kernel (RegionInfo::make_dynamic) would need the value of a size that
// changes with the symbols for more than its parameters express (a schedule's choice, an
// unrolled count, a constant of the kernel); generate_dynamic turns it into "no dynamic kernel"
// and the message into the reason.
class NotSizeIndependent : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Vector width: elements per thread per access, so that the narrowest buffer moves 16 bytes
// (at most 8 elements); 1 when vectorizing is off. Then the largest power of two not above it
// that divides every extent in `divides`.
int vector_width(const RegionInfo& info, bool vectorize, const std::vector<int64_t>& divides);
// The same for one buffer of `element_size`-byte elements.
int vector_width(int element_size, bool vectorize, const std::vector<int64_t>& divides);

}  // namespace fusejit::templates
