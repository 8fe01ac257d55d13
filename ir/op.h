// ir/op: the op table. Every op of the IR is one row here; code asks the table for an op's
// name, arity and properties instead of growing `if` chains.
//
// Composite ops (softmax, layer_norm, rms_norm, var, linear, addcmul, squeeze, unsqueeze,
// transpose, narrow, chunk; arange's start and step; index_select, embedding, dropout) are not
// rows: the API decomposes them into these primitives when they are recorded, so the fuser sees
// one language.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace fusejit::ir {

// What an op does to its operands, which decides shape inference, codegen and fusion.
enum class OpKind : uint8_t {
  source,   // input, constant, arange: no operands
  unary,    // elementwise, one operand
  binary,   // elementwise, two operands broadcast together
  compare,  // elementwise, two operands, bool result
  select,   // where(cond, a, b)
  cast,     // elementwise conversion to the node's dtype
  reduce,   // reduction over `axes`
  view,     // reshape, permute, expand, slice, concat: index arithmetic, never a copy
  matmul,   // GEMM boundary: a library call, never generated
  gather,   // gather(x, idx) axes=[a]: x read at positions loaded from an index tensor
  random,   // rand, randn: one operand, the key i64[2] {seed, offset} (ir/random.h); a pure
            // function of the key's values and the element's position
  update,   // update_slice(dst, src, start) axis=a: dst with src written along axis a from the
            // position `start` holds at run time; the write lands in dst's buffer, in place
};

// Op flags.
inline constexpr uint32_t kCommutative = 1u << 0;   // binary op with f(a,b) == f(b,a)
inline constexpr uint32_t kFloatResult = 1u << 1;   // integer/bool operands promote to f32
inline constexpr uint32_t kFloatOnly = 1u << 2;     // integer/bool operands are an error
// The result is one of the operands, or its exact negation or absolute value: no rounding is
// needed when the operands already have the result's dtype.
inline constexpr uint32_t kKeepsValue = 1u << 3;
// An elementwise op whose device form is a long instruction sequence (a series with a slow path
// for large arguments): the partitioner does not evaluate it again in other regions
// (fusion/recompute.h), where cheaper ops are recomputed rather than written and read back.
inline constexpr uint32_t kCostly = 1u << 4;

// How a reduction starts and combines two partial results: sum (from 0), max (from the lowest
// value of the type, NaN sticking), min (from the highest); none for other ops.
enum class Combine : uint8_t { none, sum, max, min };

// Where the device's approximate form of an elementwise op may be used (device/fj_math.cuh,
// fj_fast_<op>): in kernels whose every output is stored at most as finely as this dtype, whose
// rounding hides the approximation's error (bounds in docs/numerics.md): f16 allows it for
// f16 and bf16 outputs, bf16 for bf16 only; none: always precise.
//   exp        __expf: relative error < 2^-16 for |x| < 88
//   sigmoid    __expf and a fast reciprocal
//   silu       x * the fast sigmoid
//   div        a * rcp(b): relative error < 2^-22
//   tanh       tanh.approx: relative error < 2^-10.9 (bf16 only)
//   gelu_tanh  x * the fast sigmoid of 2u
enum class FastForm : uint8_t { none, f16, bf16 };

// The arity of an op that takes any number of operands, at least one (concat).
inline constexpr int kVariadic = -1;

// X(identifier, text name, arity, kind, flags, combine, approx)
#define FUSEJIT_OPS(X)                                                     \
  X(input, "input", 0, source, 0, none, none)                              \
  X(constant, "const", 0, source, 0, none, none)                           \
  X(arange, "arange", 0, source, 0, none, none)                            \
  X(neg, "neg", 1, unary, kKeepsValue, none, none)                         \
  X(abs, "abs", 1, unary, kKeepsValue, none, none)                         \
  X(exp, "exp", 1, unary, kFloatResult, none, f16)                         \
  X(log, "log", 1, unary, kFloatResult, none, none)                        \
  X(sqrt, "sqrt", 1, unary, kFloatResult, none, none)                      \
  X(rsqrt, "rsqrt", 1, unary, kFloatResult, none, none)                    \
  X(sin, "sin", 1, unary, kFloatResult | kCostly, none, none)              \
  X(cos, "cos", 1, unary, kFloatResult | kCostly, none, none)              \
  X(tanh, "tanh", 1, unary, kFloatResult, none, bf16)                      \
  X(sigmoid, "sigmoid", 1, unary, kFloatResult, none, f16)                 \
  X(relu, "relu", 1, unary, kKeepsValue, none, none)                       \
  X(gelu, "gelu", 1, unary, kFloatResult | kCostly, none, none)            \
  X(gelu_tanh, "gelu_tanh", 1, unary, kFloatResult, none, f16)             \
  X(silu, "silu", 1, unary, kFloatResult, none, f16)                       \
  X(reciprocal, "reciprocal", 1, unary, kFloatResult, none, none)          \
  X(add, "add", 2, binary, kCommutative, none, none)                       \
  X(sub, "sub", 2, binary, 0, none, none)                                  \
  X(mul, "mul", 2, binary, kCommutative, none, none)                       \
  X(div, "div", 2, binary, kFloatResult, none, f16)                        \
  X(maximum, "maximum", 2, binary, kCommutative | kKeepsValue, none, none) \
  X(minimum, "minimum", 2, binary, kCommutative | kKeepsValue, none, none) \
  X(pow, "pow", 2, binary, kCostly, none, none)                            \
  X(eq, "eq", 2, compare, kCommutative, none, none)                        \
  X(ne, "ne", 2, compare, kCommutative, none, none)                        \
  X(lt, "lt", 2, compare, 0, none, none)                                   \
  X(le, "le", 2, compare, 0, none, none)                                   \
  X(gt, "gt", 2, compare, 0, none, none)                                   \
  X(ge, "ge", 2, compare, 0, none, none)                                   \
  X(where, "where", 3, select, kKeepsValue, none, none)                    \
  X(cast, "cast", 1, cast, kKeepsValue, none, none)                        \
  X(sum, "sum", 1, reduce, 0, sum, none)                                   \
  X(mean, "mean", 1, reduce, kFloatOnly, sum, none)                        \
  X(max, "max", 1, reduce, 0, max, none)                                   \
  X(min, "min", 1, reduce, 0, min, none)                                   \
  X(reshape, "reshape", 1, view, 0, none, none)                            \
  X(permute, "permute", 1, view, 0, none, none)                            \
  X(expand, "expand", 1, view, 0, none, none)                              \
  X(slice, "slice", 1, view, 0, none, none)                                \
  X(concat, "concat", kVariadic, view, 0, none, none)                      \
  X(matmul, "matmul", 2, matmul, kFloatOnly, none, none)                   \
  X(gather, "gather", 2, gather, 0, none, none)                            \
  X(rand, "rand", 1, random, 0, none, none)                                \
  X(randn, "randn", 1, random, 0, none, none)                              \
  X(update_slice, "update_slice", 3, update, 0, none, none)

enum class Op : uint8_t {
#define FUSEJIT_OP_ENUM(id, name, arity, kind, flags, combine, approx) id,
  FUSEJIT_OPS(FUSEJIT_OP_ENUM)
#undef FUSEJIT_OP_ENUM
};

inline constexpr int kNumOps = 0
#define FUSEJIT_OP_COUNT(id, name, arity, kind, flags, combine, approx) +1
    FUSEJIT_OPS(FUSEJIT_OP_COUNT)
#undef FUSEJIT_OP_COUNT
    ;
static_assert(kNumOps == 47, "an op was added or removed: update the interpreter, codegen, tests");

struct OpInfo {
  std::string_view name;
  int arity;
  OpKind kind;
  uint32_t flags;
  Combine combine;
  FastForm approx;
};

inline constexpr OpInfo kOpTable[kNumOps] = {
#define FUSEJIT_OP_INFO(id, name, arity, kind, flags, combine, approx) \
  {name, arity, OpKind::kind, flags, Combine::combine, FastForm::approx},
    FUSEJIT_OPS(FUSEJIT_OP_INFO)
#undef FUSEJIT_OP_INFO
};

constexpr const OpInfo& op_info(Op op) { return kOpTable[static_cast<int>(op)]; }
constexpr std::string_view op_name(Op op) { return op_info(op).name; }
constexpr OpKind op_kind(Op op) { return op_info(op).kind; }
constexpr int op_arity(Op op) { return op_info(op).arity; }  // kVariadic: any, at least 1
// Whether `count` operands are what the op takes.
constexpr bool arity_ok(Op op, size_t count) {
  return op_arity(op) == kVariadic ? count >= 1 : count == static_cast<size_t>(op_arity(op));
}
constexpr bool op_has(Op op, uint32_t flag) { return (op_info(op).flags & flag) != 0; }
constexpr Combine op_combine(Op op) { return op_info(op).combine; }
constexpr FastForm op_fast_form(Op op) { return op_info(op).approx; }

// Elementwise: unary, binary, compare, select, cast.
constexpr bool is_elementwise(Op op) {
  const OpKind k = op_kind(op);
  return k == OpKind::unary || k == OpKind::binary || k == OpKind::compare ||
         k == OpKind::select || k == OpKind::cast;
}

std::optional<Op> parse_op(std::string_view name);

}  // namespace fusejit::ir
