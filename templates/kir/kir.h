// templates/kir: the kernel IR. Templates decide a kernel's structure on it (its loops, its
// loads and stores, its reductions and declarations) and the printer turns it into CUDA C; no
// template writes C text of its own.
//
// A kernel is a Function: a signature and a Block of statements. Statements declare, assign,
// call, loop and branch; expressions are trees of variables, literals, calls, operators,
// subscripts, fields, casts, element offsets (a symbolic Index from templates/kir/index.h),
// CUDA built-ins and typed device operations (barriers, fences, atomics, warp and block
// reductions, vector loads and stores). A variable is an object (Var): the declaration that
// makes it (a let, an array, a loop, a parameter) hands it back, and every read refers to it,
// so two variables that print alike stay two variables. Because every variable a statement
// reads is a node of its expressions, questions such as "does this loop body read `k`?" are
// answered by walking the tree and comparing the objects (uses()), never by searching printed
// text or comparing names, and verify() checks that every variable is declared before it is
// read.
//
// Building, then passes, then printing. place_declarations keeps a value offered with
// let_if_read only where a later statement reads it; lower_indices turns offsets and extents
// into plain arithmetic (numbering a dynamic kernel's runtime extents); printing is mechanical:
// an operator node prints as `a op b` and only group() adds parentheses, so a tree prints
// exactly as built, and the printer decides nothing. dump() shows the tree between steps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "templates/kir/index.h"

namespace fusejit::templates::kir {

enum class ExprKind {
  var,        // a kernel variable (declared by a statement, a loop or a parameter)
  lit,        // a C literal (lit() refuses other text): 3, 0x1p-2f, (-4LL), true
  call,       // text(args...): a function, possibly with template arguments in `text`
  infix,      // args[0] text args[1]
  prefix,     // text args[0]: &x, *p, !c, -x
  select,     // args[0] ? args[1] : args[2]
  group,      // (args[0])
  subscript,  // args[0][args[1]]
  cast,       // (text)args[0]
  offset,     // the row-major offset of `at` (lane-0 variable of the lane root when lane0)
  member,     // args[0].text: a field of a struct value
  extent,     // a count that a dynamic kernel may take at launch: `number`, or its argument
  braces,     // {args...}: an initializer list (wrap > 0: a line break after every wrap elements)
  builtin,    // a CUDA built-in index or size (Builtin, in `number`)
  intrinsic,  // a typed device operation (Intrinsic, in `number`) of args, with `numbers`
};

// The CUDA built-ins kernels read (1-D launches only).
enum class Builtin { thread_index, block_index, grid_blocks, block_threads };

// Device operations with a meaning of their own: barriers, fences, atomics, the reductions over
// a warp or a block, and 16-byte vector moves. Each prints as the device helper (or CUDA
// function) that implements it; `numbers` are its compile-time parameters.
enum class Intrinsic {
  sync_block,    // __syncthreads()
  sync_cluster,  // fj_cluster_sync(): every block of the cluster, release then acquire
  fence,         // __threadfence()
  atomic_add,    // atomicAdd(args[0], args[1]): the old value
  warp_reduce,   // fj_warp_reduce<numbers[0], numbers[1]>(value, op): lanes numbers[0] apart,
                 // over groups of numbers[1] lanes
  block_reduce,  // fj_block_reduce<numbers[0]>(value, op): over a block of numbers[0] threads
  load_vec,      // fj_load_vec(dst, src): one 16-byte load into a register array
  store_vec,     // fj_store_vec(dst, src): one 16-byte store of a register array
};

// A kernel variable. Its identity is the object: the passes compare Var pointers, and the name
// is only what it prints as (two variables may share one in different scopes).
struct Var {
  std::string name;
  std::string type;  // the C type it is declared with, qualifiers included
};
using VarP = std::shared_ptr<const Var>;

struct Expr;
using ExprP = std::shared_ptr<const Expr>;

struct Expr {
  ExprKind kind = ExprKind::lit;
  std::string text;
  VarP var;  // var: the variable read
  std::vector<ExprP> args;
  Index at;            // offset only
  bool lane0 = false;  // offset only
  int64_t number = 0;  // extent: the count; builtin, intrinsic: which
  std::vector<int64_t> numbers;  // intrinsic: compile-time parameters
  int wrap = 0;        // braces only
};

// A variable made ahead of its declaration, for a value read before the statement that declares
// it is built (a loop variable an index's root names); the declarations that take a VarP
// declare it. Variables are otherwise made by their declarations.
VarP variable(std::string type, std::string name);
// A read of `v`.
ExprP var(VarP v);

// Throws InternalError for text that is not a literal.
ExprP lit(std::string text);
ExprP lit(int64_t value);
ExprP call(std::string fn, std::vector<ExprP> args);
ExprP infix(ExprP lhs, std::string op, ExprP rhs);
ExprP prefix(std::string op, ExprP e);
ExprP select(ExprP cond, ExprP then, ExprP otherwise);
ExprP group(ExprP e);
ExprP subscript(ExprP array, ExprP index);
ExprP cast(std::string type, ExprP value);
ExprP offset(const Index& at, bool lane0 = false);
ExprP member(ExprP object, std::string field);
// A count (a loop bound, a row length, a mean's divisor) that prints as itself, or in a dynamic
// kernel, where it stands for a runtime extent, as that extent's argument fj_e<k>.
ExprP extent(int64_t n);
ExprP builtin(Builtin which);
ExprP thread_index();  // threadIdx.x
ExprP block_index();   // blockIdx.x
ExprP grid_blocks();   // gridDim.x
ExprP sync_block();
ExprP sync_cluster();
ExprP fence();
ExprP atomic_add(ExprP address, ExprP value);
ExprP warp_reduce(ExprP value, ExprP op, int64_t lanes_apart, int64_t group);
ExprP block_reduce(ExprP value, ExprP op, int64_t block);
ExprP load_vec(ExprP dst, ExprP src);
ExprP store_vec(ExprP dst, ExprP src);
// {a, b, ...}, an initializer list. With wrap > 0 it breaks the line after every `wrap` elements,
// the next line starting under the first element (where the list is a declarator's value).
ExprP braces(std::vector<ExprP> elements, int wrap = 0);
// `a + b`, `a * b`, ... (shorthands of infix)
ExprP add(ExprP a, ExprP b);
ExprP mul(ExprP a, ExprP b);
ExprP lt(ExprP a, ExprP b);

enum class StmtKind {
  let,      // [const ]type name[ = value];            (declaration of a scalar)
  array,    // [qualifiers ]type name[length];          (declaration of an array)
  assign,   // target op value;                         (op: "=", "+=", ...)
  eval,     // value;                                   (a call for its effect)
  loop,     // for (type name = init; cond; step) { body }
  branch,   // if (cond) { body }
  jump,     // text;  (continue, break, return)
  comment,  // // text
  blank,    // an empty line
  declare,  // type d0[dims] = v0, d1 = v1, ...;      (declaration of several variables)
  pragma,   // #pragma text, at column 0 (#pragma unroll)
};

struct Block;
using BlockP = std::shared_ptr<Block>;

// One variable of a declare statement: name[dims[0]][dims[1]].. = value (no dims: a scalar; no
// value: uninitialized). The builder gives the name, and Block::declare makes the variable, or
// the builder gives a variable made ahead (its name the same) that a later declarator reads.
struct Declarator {
  std::string name;
  std::vector<ExprP> dims;  // a null dim prints `[]` (extern __shared__ memory sized at launch)
  ExprP value;
  VarP var;
};

struct Stmt {
  StmtKind kind = StmtKind::comment;
  VarP var;               // let, array, loop: the variable declared (its name and C type)
  std::string type;       // declare: the declarators' type (with qualifiers such as __shared__)
  bool is_const = false;  // let: `const`
  bool if_read = false;   // let: kept by place_declarations only where a later statement reads it
  ExprP value;            // let: initializer (may be null); assign, eval: value; branch: condition
  ExprP target;           // assign: what is assigned
  std::string op;         // assign: "=", "+=", ...
  std::vector<int64_t> dims;  // array: the length of each dimension
  ExprP init, bound;          // loop: `var = init; var < bound`
  ExprP step;                 // loop: `var += step`, or `++var` when null
  int unroll = 0;             // loop: 1 puts `#pragma unroll` before it, n > 1 `#pragma unroll n`
  std::string text;           // comment; let, assign, eval: a trailing comment
  BlockP body;                // loop, branch
  std::vector<Declarator> declarators;  // declare (type: the type with its qualifiers)
  bool inline_body = false;  // loop, branch: the body, one statement, on the same line, no braces
};

struct Loop;

// A sequence of statements, built front to back. Nested blocks (loop and branch bodies) are
// returned by reference and stay valid while more statements are added. Every declaration
// makes its variable and returns a read of it (a VarP overload declares one made ahead with
// variable()).
struct Block {
  std::vector<Stmt> stmts;

  // const type name = value;  (or `type name = value;` / `type name;` with let_mut)
  ExprP let(std::string type, std::string name, ExprP value, std::string comment = {});
  ExprP let(VarP v, ExprP value, std::string comment = {});
  ExprP let_mut(std::string type, std::string name, ExprP value = nullptr);
  ExprP let_mut(VarP v, ExprP value = nullptr);
  // A const let that place_declarations keeps only where a statement after it reads it: a
  // value a template offers to code it has not built yet (a row index, a lane's element).
  ExprP let_if_read(std::string type, std::string name, ExprP value, std::string comment = {});
  ExprP let_if_read(VarP v, ExprP value, std::string comment = {});
  ExprP array(std::string type, std::string name, int64_t length);
  ExprP array(std::string type, std::string name, std::vector<int64_t> dims);  // name[d0][d1]..
  ExprP array(VarP v, std::vector<int64_t> dims);
  void assign(ExprP target, ExprP value, std::string op = "=");
  void eval(ExprP value, std::string comment = {});
  // for (type name = init; name < bound; name += step) or ++name when step is null.
  Loop loop(std::string type, std::string name, ExprP init, ExprP bound, ExprP step = nullptr,
            int unroll = 0);
  Loop loop(VarP v, ExprP init, ExprP bound, ExprP step = nullptr, int unroll = 0);
  Block& branch(ExprP cond);
  template <class... Args>
  void comment(fmt::format_string<Args...> f, Args&&... args) {
    Stmt s;
    s.kind = StmtKind::comment;
    s.text = fmt::format(f, std::forward<Args>(args)...);
    stmts.push_back(std::move(s));
  }
  void blank();
  void jump(std::string what);  // continue, break, return
  // `type d0 = v0, d1[n] = {..}, ...;`: several variables of one type, declared in one statement
  // (a declarator may read those before it); type carries the qualifiers ("constexpr int",
  // "__shared__ __align__(16) float"). Returns the variables, in order.
  std::vector<ExprP> declare(std::string type, std::vector<Declarator> vars,
                             std::string comment = {});
  // `#pragma text` on a line of its own at column 0, as preprocessor lines are conventionally
  // written (a loop's own `unroll` indents its pragma with the loop).
  void pragma(std::string text);
  // loop and branch whose body is one statement printed on their line, without braces:
  //   for (int n = 0; n < 8; ++n) x[n] = 0;        if (i >= n) continue;
  Loop loop_line(std::string type, std::string name, ExprP init, ExprP bound, ExprP step = nullptr,
                 int unroll = 0);
  Block& branch_line(ExprP cond);
  // Appends another block's statements.
  void splice(const Block& other);
  bool empty() const { return stmts.empty(); }

 private:
  Loop add_loop(VarP v, ExprP init, ExprP bound, ExprP step, int unroll, bool inline_body);
};

// What a loop builder hands back: its body and a read of its loop variable. It converts to the
// body, so `Block& body = out.loop(...)` takes the body alone.
struct Loop {
  Block& body;
  ExprP index;
  operator Block&() const { return body; }  // NOLINT(google-explicit-constructor)
};

// A kernel parameter: `const T* __restrict__ name  // comment` (or without const for outputs),
// or a scalar `T name  // comment`; the variable's type is the element type (a scalar's type).
struct Param {
  VarP var;
  bool is_const = true;
  std::string comment;
  bool pointer = true;
};

struct Function {
  Block head;        // before the signature, at module scope: comments and __device__ scratch
  std::string name;  // the kernel's name (a placeholder until generate names it)
  int block = 256;   // __launch_bounds__(block[, min_blocks])
  int min_blocks = 0;
  // Not empty: min_blocks is asked for through the macro FJ_MIN_BLOCKS, which jit::compile
  // defines to each of these in turn, fewer each time, while ptxas would spill to fit
  // (Kernel::relaxed_min_blocks).
  std::vector<int> relaxed_min_blocks;
  int cluster = 1;   // > 1: __cluster_dims__(cluster, 1, 1), blocks per thread-block cluster
  std::vector<Param> params;
  bool params_inline = false;  // the parameters on the signature's line (none may carry a comment)
  Block body;

  // Adds a parameter of a new variable; returns a read of it.
  ExprP param(std::string type, std::string name, bool is_const = true, std::string comment = {},
              bool pointer = true);
};

// Whether an expression, a statement or a block reads the variable `v`, the object (an offset
// reads the roots of its index, or their lane-0 variables).
bool uses(const ExprP& e, const VarP& v);
bool uses(const Stmt& s, const VarP& v);
bool uses(const Block& b, const VarP& v);

// The declaration pass: removes every let_if_read declaration that no later statement of its
// block (nested blocks included) reads, until none is left unread (a removed declaration's
// value may have been the only reader of another).
void place_declarations(Function& f);

// Checks that every variable read (the object) is declared before, in an enclosing block or as
// a parameter, and that no function or type text spells a declared variable's name (a read the
// passes could not see); throws InternalError naming the first violation.
void verify(const Function& f);

// The pass between building and printing: every offset becomes its index arithmetic
// (offset_expr, index.h: digits, place values, no-op divisions and modulos left out) and every
// extent its number. With `runtime` (a dynamic kernel), the numbers that stand for runtime
// extents become reads of the kernel's arguments fj_e<k> (divisions by them fast divisions over
// fj_m<k>, templates/kir/fastdiv.h), variables registered in `runtime` in the order the pass meets
// them: statements in order, within one its target, value, loop start, bound and step, operands
// left to right. The caller adds those arguments to the signature.
void lower_indices(Function& f, RuntimeExtents* runtime = nullptr);

// A dynamic kernel's sizes are its parameters: after lower_indices, no integer constant of `f`
// (a literal, an array's length, a device operation's compile-time parameter, an unroll count)
// may be one of the region's sizes that change with the symbols (`is_size`;
// generate_dynamic: a product of adjacent dims of a node, or a multiple of the outer extent).
// Builders take such sizes as kir::extent (a runtime extent), in index arithmetic (offsets), or
// per outer unit times fj_outer (outer_extent, lower.h). Returns where the first such constant
// is, or nothing.
std::optional<std::string> symbolic_constant(const Function& f,
                                             const std::function<bool(int64_t)>& is_size);

// The tree as text, for FUSEJIT_DUMP=kir: one statement per line (nested blocks indented),
// expressions as prefix forms, `(+ i (* j 4))`, `(call fj_load in0 i)`, `(offset i / 4 % 3)`,
// a variable as its name;
// what each step of code generation leaves, not C.
std::string dump(const Function& f);

// C text, mechanically: each node as itself. Throws InternalError for an offset or extent
// (lower_indices first).
std::string print(const ExprP& e);
std::string print(const Function& f);

}  // namespace fusejit::templates::kir
