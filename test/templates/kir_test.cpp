// The kernel IR (templates/kir/kir.h): what trees print as, which variables a block reads (the
// objects, not their names) and what verify() rejects; and the structural keys of the value
// memo (templates/lower.h).
#include "templates/kir/kir.h"

#include "fusejit/error.h"
#include "support/catch.h"
#include "templates/lower.h"

using namespace fusejit;
using namespace fusejit::templates;

namespace {

// A read of a new int variable, for trees that are printed, not checked.
kir::ExprP fresh(const char* name) { return kir::var(kir::variable("int", name)); }

kir::Function small_kernel() {
  kir::Function f;
  f.name = "k";
  f.block = 128;
  const kir::ExprP in = f.param("float", "in0", true, "%0 f32[64]");
  const kir::ExprP out = f.param("float", "out0", false, "%1 f32[64]");
  f.head.comment("a doubling sweep");
  const auto [loop, t] = f.body.loop("int", "t", kir::thread_index(), kir::lit(64), kir::lit(128));
  const kir::ExprP x = loop.let("float", "x", kir::subscript(in, t));
  loop.assign(kir::subscript(out, t), kir::call("fj_mul", {x, kir::lit("0x1p+1f")}), "=");
  return f;
}

// The loop body of small_kernel and a read of its variable t.
kir::Block& sweep(kir::Function& f) { return *f.body.stmts[0].body; }
kir::ExprP t_of(const kir::Function& f) { return kir::var(f.body.stmts[0].var); }

}  // namespace

TEST_CASE("a kernel function prints as built", "[templates][kir]") {
  const kir::Function f = small_kernel();
  CHECK(kir::print(f) ==
        "// a doubling sweep\n"
        "extern \"C\" __global__ void __launch_bounds__(128) k(\n"
        "    const float* __restrict__ in0,  // %0 f32[64]\n"
        "    float* __restrict__ out0) {  // %1 f32[64]\n"
        "  for (int t = threadIdx.x; t < 64; t += 128) {\n"
        "    const float x = in0[t];\n"
        "    out0[t] = fj_mul(x, 0x1p+1f);\n"
        "  }\n"
        "}\n");
  CHECK_NOTHROW(kir::verify(f));
}

TEST_CASE("a cluster kernel prints its cluster shape before its launch bounds", "[templates][kir]") {
  kir::Function f = small_kernel();
  f.cluster = 4;
  f.min_blocks = 2;
  const std::string text = kir::print(f);
  CHECK(text.find("extern \"C\" __global__ void __cluster_dims__(4, 1, 1) "
                  "__launch_bounds__(128, 2) k(\n") != std::string::npos);
}

TEST_CASE("expressions print with the parentheses the tree has, and no others",
          "[templates][kir]") {
  const kir::ExprP a = fresh("a"), b = fresh("b");
  CHECK(kir::print(kir::mul(kir::add(a, b), kir::lit(2))) == "a + b * 2");
  CHECK(kir::print(kir::mul(kir::group(kir::add(a, b)), kir::lit(2))) == "(a + b) * 2");
  CHECK(kir::print(kir::prefix("&", kir::subscript(a, kir::lit(3)))) == "&a[3]");
  CHECK(kir::print(kir::cast("long long", kir::block_index())) == "(long long)blockIdx.x");
  CHECK(kir::print(kir::call("f<4>", {})) == "f<4>()");
  CHECK(kir::print(kir::select(kir::lt(a, b), a, kir::lit(0))) == "a < b ? a : 0");
  kir::Block b2;
  b2.array("__shared__ float", "tile", {4, 8});
  b2.loop("int", "j", kir::lit(0), kir::lit(4), nullptr, 1).body.jump("continue");
  b2.loop("int", "q", kir::lit(0), kir::lit(9), kir::lit(2), 4);
  kir::Function f;
  f.name = "g";
  f.body = b2;
  const std::string text = kir::print(f);
  CHECK(text.find("  __shared__ float tile[4][8];\n") != std::string::npos);
  CHECK(text.find("  #pragma unroll\n  for (int j = 0; j < 4; ++j) {\n    continue;\n  }\n") !=
        std::string::npos);
  CHECK(text.find("  #pragma unroll 4\n  for (int q = 0; q < 9; q += 2) {\n  }\n") !=
        std::string::npos);
}

TEST_CASE("device operations are typed nodes that print as their helpers", "[templates][kir]") {
  const kir::ExprP a = fresh("a"), op = kir::call("fj_op_sum", {});
  CHECK(kir::print(kir::sync_block()) == "__syncthreads()");
  CHECK(kir::print(kir::sync_cluster()) == "fj_cluster_sync()");
  CHECK(kir::print(kir::fence()) == "__threadfence()");
  CHECK(kir::print(kir::atomic_add(a, kir::lit("1u"))) == "atomicAdd(a, 1u)");
  CHECK(kir::print(kir::warp_reduce(a, op, 1, 8)) == "fj_warp_reduce<1, 8>(a, fj_op_sum())");
  CHECK(kir::print(kir::block_reduce(a, op, 256)) == "fj_block_reduce<256>(a, fj_op_sum())");
  CHECK(kir::print(kir::load_vec(a, fresh("p"))) == "fj_load_vec(a, p)");
  CHECK(kir::print(kir::store_vec(fresh("p"), a)) == "fj_store_vec(p, a)");
  CHECK(kir::print(kir::grid_blocks()) == "gridDim.x");
  // What a reduction or a barrier is stays in the tree: its kind and parameters, not text.
  const kir::ExprP r = kir::warp_reduce(a, op, 4, 32);
  CHECK(r->kind == kir::ExprKind::intrinsic);
  CHECK(static_cast<kir::Intrinsic>(r->number) == kir::Intrinsic::warp_reduce);
  CHECK(r->numbers == std::vector<int64_t>{4, 32});
  kir::Function f = small_kernel();
  f.body.eval(kir::sync_block());
  CHECK(kir::dump(f).find("eval (__syncthreads)") != std::string::npos);
}

TEST_CASE("declarations, initializer lists, pragmas and one-line bodies print as built",
          "[templates][kir]") {
  kir::Function f;
  f.name = "h";
  f.block = 128;
  f.min_blocks = 1;
  f.params_inline = true;
  f.param("unsigned short", "q");
  f.param("unsigned short", "o", false);
  const kir::VarP kn = kir::variable("constexpr int", "kN");  // read by the next declarator
  const std::vector<kir::ExprP> n = f.body.declare(
      "constexpr int",
      {{"kN", {}, kir::lit(8), kn}, {"kM", {}, kir::mul(kir::var(kn), kir::lit(2))}});
  const std::vector<kir::ExprP> a = f.body.declare(
      "float",
      {{"a", {n[0]}, nullptr}, {"m", {kir::lit(2)}, kir::braces({kir::lit("0.0f"), n[1]})}},
      "running");
  f.body.pragma("unroll");
  const auto [zero, i] = f.body.loop_line("int", "i", kir::lit(0), n[0]);
  zero.assign(kir::subscript(a[0], i), kir::lit("0.0f"));
  const auto [lanes, e] = f.body.loop("int", "e", kir::lit(0), n[1]);
  lanes.branch_line(kir::lt(e, kir::lit(3))).jump("continue");
  std::vector<kir::ExprP> four;
  for (int i = 0; i < 4; ++i) four.push_back(kir::subscript(a[0], kir::lit(i)));
  lanes.declare("const float", {{"pf", {kir::lit(4)}, kir::braces(four, 2)}});
  CHECK(kir::print(f) ==
        "extern \"C\" __global__ void __launch_bounds__(128, 1) h(const unsigned short* "
        "__restrict__ q, unsigned short* __restrict__ o) {\n"
        "  constexpr int kN = 8, kM = kN * 2;\n"
        "  float a[kN], m[2] = {0.0f, kM};  // running\n"
        "#pragma unroll\n"
        "  for (int i = 0; i < kN; ++i) a[i] = 0.0f;\n"
        "  for (int e = 0; e < kM; ++e) {\n"
        "    if (e < 3) continue;\n"
        "    const float pf[4] = {a[0], a[1],\n"
        "                         a[2], a[3]};\n"
        "  }\n"
        "}\n");
  CHECK_NOTHROW(kir::verify(f));
  CHECK(kir::uses(f.body, n[1]->var));  // read by a dimension, a value and a loop bound
  CHECK_FALSE(kir::uses(f.body, a[1]->var));
  // A declarator reads only those before it.
  kir::Function g = f;
  const kir::VarP y = kir::variable("int", "y");
  g.body.declare("int", {{"x", {}, kir::var(y)}, {"y", {}, kir::lit(1), y}});
  CHECK_THROWS_AS(kir::verify(g), InternalError);
  // A one-line body is one statement.
  kir::Function h;
  h.name = "h2";
  kir::Block& two = h.body.branch_line(kir::lit("true"));
  two.jump("continue");
  two.jump("break");
  CHECK_THROWS_AS(kir::print(h), InternalError);
}

TEST_CASE("uses() finds variables through nested blocks and element offsets", "[templates][kir]") {
  const kir::VarP row = kir::variable("int", "row"), k = kir::variable("int", "k"),
                  k0 = kir::variable("int", "k0");
  const Index at = index_from_digits(
      {Digit{make_root(row, 8), 1, 8}, Digit{make_lane_root(k, k0, 64, 4), 1, 64}}, {8, 64});
  kir::Block b;
  const kir::VarP u = kir::variable("int", "u"), r0 = kir::variable("float", "r0");
  kir::Block& inner = b.branch(kir::lt(kir::var(u), kir::lit(3)));
  inner.eval(kir::call("fj_load_vec", {kir::var(r0), kir::offset(at, true)}));
  CHECK(kir::uses(b, u));
  CHECK(kir::uses(b, r0));
  CHECK(kir::uses(b, row));
  CHECK(kir::uses(b, k0));  // the lane-0 variable, printed for lane0 offsets
  CHECK_FALSE(kir::uses(b, k));
  // A declaration is not a use.
  kir::Block d;
  const kir::ExprP i = d.let("int", "i", kir::lit(0));
  CHECK_FALSE(kir::uses(d, i->var));
}

TEST_CASE("variables are objects: two of one name are two variables", "[templates][kir]") {
  kir::Block b;
  const kir::ExprP outer = b.let("int", "x", kir::lit(1));
  const auto [loop, t] = b.loop("int", "t", kir::lit(0), kir::lit(4));
  const kir::ExprP inner = loop.let("int", "x", kir::add(t, kir::lit(2)));
  loop.eval(kir::call("use", {inner}));
  CHECK(outer->var != inner->var);
  CHECK(kir::print(outer) == kir::print(inner));
  CHECK(kir::uses(b, inner->var));
  CHECK_FALSE(kir::uses(b, outer->var));  // only the inner x is read
  // Every read of a declaration refers to the variable it made.
  CHECK(kir::uses(loop, t->var));
  CHECK(b.stmts[1].var == t->var);
}

TEST_CASE("verify() rejects undeclared reads and variables hidden in text", "[templates][kir]") {
  {
    kir::Function f = small_kernel();
    sweep(f).eval(kir::call("use", {fresh("y")}));
    CHECK_THROWS_AS(kir::verify(f), InternalError);
  }
  {
    // A variable that prints like a declared one is still not declared.
    kir::Function f = small_kernel();
    sweep(f).eval(kir::call("use", {fresh("x")}));
    CHECK_THROWS_AS(kir::verify(f), InternalError);
  }
  {
    // A loop variable is out of scope after its loop.
    kir::Function f = small_kernel();
    f.body.eval(kir::call("use", {t_of(f)}));
    CHECK_THROWS_AS(kir::verify(f), InternalError);
  }
  {
    // Text cannot hide a read from uses(): lit() takes literals only, and a call's text that
    // spells a declared variable is refused.
    CHECK_THROWS_AS(kir::lit("x + 1"), InternalError);
    CHECK_THROWS_AS(kir::lit("threadIdx.x"), InternalError);
    kir::Function f = small_kernel();
    sweep(f).eval(kir::call("fj_use<x>", {}));
    CHECK_THROWS_AS(kir::verify(f), InternalError);
  }
  {
    // Built-ins and literals are not variables.
    kir::Function f = small_kernel();
    sweep(f).let("float", "p", kir::lit("0x1p+3f"));
    sweep(f).let("int", "w", kir::builtin(kir::Builtin::block_threads));
    sweep(f).let("long long", "m", kir::lit("(-9223372036854775807LL - 1)"));
    sweep(f).let("float", "n", kir::lit("__uint_as_float(0x7fffffffu)"));
    CHECK_NOTHROW(kir::verify(f));
  }
  {
    // Module-scope declarations in the head are visible in the body.
    kir::Function f = small_kernel();
    const kir::ExprP partial = f.head.array("__device__ float", "fj_partial0", 4);
    f.body.assign(kir::subscript(partial, kir::lit(0)), kir::lit(0));
    CHECK_NOTHROW(kir::verify(f));
  }
  {
    // An offset reads its roots: one whose variable is not declared is refused.
    kir::Function f = small_kernel();
    const Index at = index_from_root(make_root(kir::variable("int", "t"), 64), {64});
    sweep(f).let("int", "o", kir::offset(at));
    CHECK_THROWS_AS(kir::verify(f), InternalError);
  }
}

TEST_CASE("offsets and extents are lowered to arithmetic before printing", "[templates][kir]") {
  kir::Function f = small_kernel();
  const Index at = index_from_root(make_root(t_of(f)->var, 24), {2, 3, 4});
  const kir::ExprP tab = f.param("float", "tab", true, "%2 f32[3]");
  kir::Block& loop = sweep(f);
  loop.let("float", "y", kir::subscript(tab, kir::offset(broadcast_operand(at, {1, 3, 1}))));
  loop.let("int", "n", kir::extent(24));
  CHECK_NOTHROW(kir::verify(f));
  // The printer decides nothing: an offset is not C until the pass has lowered it.
  CHECK_THROWS_AS(kir::print(f), InternalError);
  const std::string built = kir::dump(f);
  CHECK(built.find("let const float y = ([] tab (offset t / 4 % 3))") != std::string::npos);
  CHECK(built.find("let const int n = (extent 24)") != std::string::npos);
  kir::lower_indices(f);
  const std::string text = kir::print(f);
  CHECK(text.find("const float y = tab[t / 4 % 3];") != std::string::npos);
  CHECK(text.find("const int n = 24;") != std::string::npos);
  CHECK(kir::dump(f).find("(% (/ t 4) 3)") != std::string::npos);
  CHECK_NOTHROW(kir::verify(f));  // the lowered arithmetic reads the same t
}

TEST_CASE("a dynamic kernel's runtime extents are numbered in the order lowering meets them",
          "[templates][kir]") {
  // Symbol values 131 and 67 (distinct primes): 131 and 4 * 67 stand for runtime extents, 4
  // does not.
  const BasePtr i = make_root(kir::variable("int", "i"), 131 * 4 * 67);
  const Index at = index_from_root(i, {131, 4, 67});
  kir::Function f;
  f.name = "k";
  kir::Block& body = f.body;
  body.let("int", "a", kir::offset(broadcast_operand(at, {1, 4, 67})));
  body.let("int", "b", kir::extent(131));
  body.let("int", "c", kir::extent(4));
  RuntimeExtents rt{.symbols = {131, 67}};
  kir::lower_indices(f, &rt);
  CHECK(rt.extents == std::vector<int64_t>{4 * 67, 131});
  CHECK(rt.dividend_bounds == std::vector<int64_t>{131 * 4 * 67});
  const std::string text = kir::print(f);
  INFO(text);
  CHECK(text.find("const int a = fj_fastmod(i, fj_e0, fj_m0);") != std::string::npos);
  CHECK(text.find("const int b = fj_e1;") != std::string::npos);
  CHECK(text.find("const int c = 4;") != std::string::npos);
  // The arguments are the variables registered: each read refers to them.
  REQUIRE(rt.extent_vars.size() == 2);
  CHECK(kir::uses(f.body, rt.extent_vars[0]));
  CHECK(kir::uses(f.body, rt.multiplier_vars[0]));
  CHECK(kir::uses(f.body, rt.extent_vars[1]));
  CHECK_FALSE(kir::uses(f.body, rt.multiplier_vars[1]));
}

TEST_CASE("the declaration pass keeps offered values only where they are read",
          "[templates][kir]") {
  kir::Function f = small_kernel();
  kir::Block& loop = sweep(f);
  const kir::ExprP t = t_of(f);
  // `row` is read by `col`, which nothing reads: both go, in two sweeps. `lane` is read in a
  // nested block and stays; a plain let is never removed.
  const kir::ExprP row = loop.let_if_read("int", "row", kir::mul(t, kir::lit(2)));
  loop.let_if_read("int", "col", kir::add(row, kir::lit(1)));
  const kir::ExprP lane = loop.let_if_read("int", "lane", kir::infix(t, "%", kir::lit(32)));
  loop.let("int", "unread", kir::lit(7));
  loop.branch(kir::lt(lane, kir::lit(4))).jump("continue");
  // `k` is offered, and another variable called k is read: the offered one goes.
  loop.let_if_read("int", "k", kir::lit(5));
  const auto [inner, k] = loop.loop("int", "k", kir::lit(0), kir::lit(2));
  inner.eval(kir::call("use", {k}));
  kir::place_declarations(f);
  const std::string text = kir::print(f);
  INFO(text);
  CHECK(text.find("row") == std::string::npos);
  CHECK(text.find("col") == std::string::npos);
  CHECK(text.find("const int lane = t % 32;") != std::string::npos);
  CHECK(text.find("const int unread = 7;") != std::string::npos);
  CHECK(text.find("const int k = 5;") == std::string::npos);
  CHECK_NOTHROW(kir::verify(f));
}

TEST_CASE("value keys compare indices by structure", "[templates][kir]") {
  const BasePtr i = make_root(kir::variable("int", "i"), 24);
  const Index at = index_from_root(i, {2, 3, 4});
  // The same element reached through a reshape and back has the same key.
  CHECK(value_key(3, at) == value_key(3, reshape_operand(reshape_operand(at, {24}), {2, 3, 4})));
  CHECK_FALSE(value_key(3, at) == value_key(4, at));
  CHECK_FALSE(value_key(3, at) == value_key(3, at, Held::vector));
  // Another element of the same node: a broadcast operand reads i / 4 % 3, not i.
  CHECK_FALSE(value_key(3, broadcast_operand(at, {1, 3, 1})) == value_key(3, at));
  // Keys compare roots by name: the memo of one kernel holds one root of each name.
  const BasePtr again = make_root(kir::variable("int", "i"), 24);
  CHECK(value_key(3, index_from_root(again, {2, 3, 4})) == value_key(3, at));
}
