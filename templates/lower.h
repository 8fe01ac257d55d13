// templates/lower: region nodes to kernel IR. Values computes a node's value at a symbolic
// index (templates/kir/index.h) as kir statements, recursively through the region, each (node,
// element) once per scope; the pieces every template shares (the kernel's parameters, loads,
// vector stores, a reduction's finish) are here too.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "templates/emit.h"
#include "templates/kir/kir.h"

namespace fusejit::templates {

// What a value memo is keyed by: the node, the element (the index's structure, not its text)
// and what is held: the value itself, or the vector of V lanes it was loaded with.
enum class Held { value, vector };
struct ValueKey {
  Held held = Held::value;
  ir::NodeId id = -1;
  IndexKey at;
  bool operator<(const ValueKey& o) const {
    return std::tie(held, id, at) < std::tie(o.held, o.id, o.at);
  }
  bool operator==(const ValueKey& o) const { return held == o.held && id == o.id && at == o.at; }
};
ValueKey value_key(ir::NodeId id, const Index& at, Held held = Held::value);

// Variables visible at a point of the kernel, innermost scope first: the statements of the
// scope go to `out`, and `memo` holds the values already computed there.
struct ValueScope {
  kir::Block* out = nullptr;
  ValueScope* parent = nullptr;
  std::map<ValueKey, kir::ExprP> memo;

  kir::ExprP find(const ValueKey& key) const;  // null when no scope holds it
};

// Computes node values in the node's arithmetic type. The template decides, through two
// hooks, where region inputs come from (plain loads, hoisted loads, vector preloads) and which
// values it already holds (a reduction's result, a register cache).
class Values {
 public:
  using LeafFn = std::function<kir::ExprP(ir::NodeId, const Index&, ValueScope&)>;
  // Asked first for every node: a value the template holds, or null to compute the node.
  using InterceptFn = std::function<kir::ExprP(ir::NodeId, const Index&)>;

  Values(const RegionInfo& info, LeafFn leaf, InterceptFn intercept = nullptr);

  kir::ExprP value(ir::NodeId id, const Index& at, ValueScope& scope);
  // The offset in its destination where the update_slice `id` writes its value's element `at`
  // (an index of the value's shape).
  kir::ExprP update_offset(ir::NodeId id, const Index& at, ValueScope& scope);
  // A fresh variable name: prefix plus a number (a prefix ending in a digit first stands alone).
  std::string fresh(std::string_view prefix);

 private:
  kir::ExprP view(const ir::Node& n, const Index& at, ValueScope& scope);
  kir::ExprP concat(ir::NodeId id, const Index& at, ValueScope& scope);
  kir::ExprP arange(ir::NodeId id, const Index& at, ValueScope& scope);
  kir::ExprP elementwise(ir::NodeId id, const Index& at, ValueScope& scope);
  kir::ExprP random(ir::NodeId id, const Index& at, ValueScope& scope);
  kir::ExprP gather(ir::NodeId id, const Index& at, ValueScope& scope);
  kir::ExprP gathered(ir::NodeId id, Index at, ValueScope& scope);

  const RegionInfo& info_;
  LeafFn leaf_;
  InterceptFn intercept_;
  std::map<std::string, int> counters_;
};

// The operand's index when `at` indexes the result of the view `n` (reshape, permute, expand).
Index view_operand(const ir::Node& n, const ir::Node& operand, const Index& at);

// fn(x), or x when fn is empty (the dtype tables' conversions).
kir::ExprP apply(std::string_view fn, kir::ExprP x);
// `value` (in the arithmetic type of `from`) converted to the arithmetic type of `to`.
kir::ExprP convert_to(DType to, DType from, kir::ExprP value);
// A value of `dtype` as a literal of its arithmetic type (see literal()).
kir::ExprP literal_of(DType dtype, double value);
// Element `offset` of a region input, converted to its arithmetic type.
kir::ExprP load(const RegionInfo& info, ir::NodeId id, kir::ExprP offset);
// The reduce node's value from its reduced accumulator over `count` elements (reduce_finish).
kir::ExprP finish(const RegionInfo& info, const ir::Node& reduce, kir::ExprP acc, int64_t count);

// The kernel function of a region: launch bounds and one parameter per region input, then
// output (in<k>, out<k>), then for a dynamic kernel the outer extent (long long fj_outer); the
// body is the template's.
kir::Function kernel_function(const RegionInfo& info, int block, int min_blocks = 0);

// A loop bound of `count` items (a sweep's vectors, a reduction's rows): the literal in a static
// kernel; in a dynamic one, count per outer unit times fj_outer in the index type (throws
// NotSizeIndependent, naming `what`, unless the outer extent divides count).
kir::ExprP outer_extent(const RegionInfo& info, int64_t count, std::string_view what);

// A V-lane vector store of `value` (one lane's value, in the dtype's arithmetic type) to `dst`
// (an aligned pointer): the lanes' values are collected in `array`, declared in `decl`, set in
// `body` (inside the lane loop, whose variable `lane` reads) and stored in `stores`.
void vector_store(kir::Block& decl, kir::Block& body, kir::Block& stores, DType dtype,
                  const std::string& array, kir::ExprP dst, int v, kir::ExprP value,
                  const kir::ExprP& lane);

}  // namespace fusejit::templates
