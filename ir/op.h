// ir/op: the op table. Every op of the IR is one row here; code asks the table for an op's
// name, arity and properties instead of growing `if` chains.
//
// Composite ops (softmax, layer_norm, rms_norm, var, linear, addcmul, squeeze, unsqueeze,
// transpose) are not rows: the API decomposes them into these primitives when they are recorded,
// so the fuser sees one language.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace fusejit::ir {

// What an op does to its operands, which decides shape inference, codegen and fusion.
enum class OpKind : uint8_t {
  source,   // input, constant: no operands
  unary,    // elementwise, one operand
  binary,   // elementwise, two operands broadcast together
  compare,  // elementwise, two operands, bool result
  select,   // where(cond, a, b)
  cast,     // elementwise conversion to the node's dtype
  reduce,   // reduction over `axes`
  view,     // reshape, permute, expand: index arithmetic, never a copy
  matmul,   // GEMM boundary: a library call, never generated
};

// Op flags.
inline constexpr uint32_t kCommutative = 1u << 0;   // binary op with f(a,b) == f(b,a)
inline constexpr uint32_t kFloatResult = 1u << 1;   // integer/bool operands promote to f32
inline constexpr uint32_t kFloatOnly = 1u << 2;     // integer/bool operands are an error
// The result is one of the operands, or its exact negation or absolute value: no rounding is
// needed when the operands already have the result's dtype.
inline constexpr uint32_t kKeepsValue = 1u << 3;

// X(identifier, text name, arity, kind, flags)
#define FUSEJIT_OPS(X)                                        \
  X(input, "input", 0, source, 0)                             \
  X(constant, "const", 0, source, 0)                          \
  X(neg, "neg", 1, unary, kKeepsValue)                                  \
  X(abs, "abs", 1, unary, kKeepsValue)                                  \
  X(exp, "exp", 1, unary, kFloatResult)                       \
  X(log, "log", 1, unary, kFloatResult)                       \
  X(sqrt, "sqrt", 1, unary, kFloatResult)                     \
  X(rsqrt, "rsqrt", 1, unary, kFloatResult)                   \
  X(sin, "sin", 1, unary, kFloatResult)                       \
  X(cos, "cos", 1, unary, kFloatResult)                       \
  X(tanh, "tanh", 1, unary, kFloatResult)                     \
  X(sigmoid, "sigmoid", 1, unary, kFloatResult)               \
  X(relu, "relu", 1, unary, kKeepsValue)                                \
  X(gelu, "gelu", 1, unary, kFloatResult)                     \
  X(gelu_tanh, "gelu_tanh", 1, unary, kFloatResult)           \
  X(silu, "silu", 1, unary, kFloatResult)                     \
  X(reciprocal, "reciprocal", 1, unary, kFloatResult)         \
  X(add, "add", 2, binary, kCommutative)                      \
  X(sub, "sub", 2, binary, 0)                                 \
  X(mul, "mul", 2, binary, kCommutative)                      \
  X(div, "div", 2, binary, kFloatResult)                      \
  X(maximum, "maximum", 2, binary, kCommutative | kKeepsValue)              \
  X(minimum, "minimum", 2, binary, kCommutative | kKeepsValue)              \
  X(pow, "pow", 2, binary, 0)                                 \
  X(eq, "eq", 2, compare, kCommutative)                       \
  X(ne, "ne", 2, compare, kCommutative)                       \
  X(lt, "lt", 2, compare, 0)                                  \
  X(le, "le", 2, compare, 0)                                  \
  X(gt, "gt", 2, compare, 0)                                  \
  X(ge, "ge", 2, compare, 0)                                  \
  X(where, "where", 3, select, kKeepsValue)                             \
  X(cast, "cast", 1, cast, kKeepsValue)                                 \
  X(sum, "sum", 1, reduce, 0)                                 \
  X(mean, "mean", 1, reduce, kFloatOnly)                      \
  X(max, "max", 1, reduce, 0)                                 \
  X(min, "min", 1, reduce, 0)                                 \
  X(reshape, "reshape", 1, view, 0)                           \
  X(permute, "permute", 1, view, 0)                           \
  X(expand, "expand", 1, view, 0)                             \
  X(matmul, "matmul", 2, matmul, kFloatOnly)

enum class Op : uint8_t {
#define FUSEJIT_OP_ENUM(id, name, arity, kind, flags) id,
  FUSEJIT_OPS(FUSEJIT_OP_ENUM)
#undef FUSEJIT_OP_ENUM
};

inline constexpr int kNumOps = 0
#define FUSEJIT_OP_COUNT(id, name, arity, kind, flags) +1
    FUSEJIT_OPS(FUSEJIT_OP_COUNT)
#undef FUSEJIT_OP_COUNT
    ;
static_assert(kNumOps == 40, "an op was added or removed: update the interpreter, codegen, tests");

struct OpInfo {
  std::string_view name;
  int arity;
  OpKind kind;
  uint32_t flags;
};

inline constexpr OpInfo kOpTable[kNumOps] = {
#define FUSEJIT_OP_INFO(id, name, arity, kind, flags) {name, arity, OpKind::kind, flags},
    FUSEJIT_OPS(FUSEJIT_OP_INFO)
#undef FUSEJIT_OP_INFO
};

constexpr const OpInfo& op_info(Op op) { return kOpTable[static_cast<int>(op)]; }
constexpr std::string_view op_name(Op op) { return op_info(op).name; }
constexpr OpKind op_kind(Op op) { return op_info(op).kind; }
constexpr int op_arity(Op op) { return op_info(op).arity; }
constexpr bool op_has(Op op, uint32_t flag) { return (op_info(op).flags & flag) != 0; }

// Elementwise: unary, binary, compare, select, cast.
constexpr bool is_elementwise(Op op) {
  const OpKind k = op_kind(op);
  return k == OpKind::unary || k == OpKind::binary || k == OpKind::compare ||
         k == OpKind::select || k == OpKind::cast;
}

std::optional<Op> parse_op(std::string_view name);

}  // namespace fusejit::ir
