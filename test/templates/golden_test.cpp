// Golden kernels: the generated source of four representative regions (and of one attention
// kernel) is checked in under
// golden/, so that a change to code generation shows up as a reviewable diff. The pasted device
// helpers are left out (they are files of their own); the kernel name (a hash of the whole
// source) still changes when they do. FUSEJIT_UPDATE_GOLDEN=1 rewrites the files.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "fusejit_test_paths.h"
#include "templates/schedulers/attention.h"
#include "test/templates/support.h"

using namespace fusejit;
using namespace fusejit::ir;
using fusion::RegionKind;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void check_golden(const std::string& name, const templates::Kernel& k) {
  const std::string path = std::string(FUSEJIT_GOLDEN_DIR) + "/" + name + ".cu";
  const std::string actual = test::kernel_text(k);
  const char* update = std::getenv("FUSEJIT_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << actual;
    WARN("rewrote " << path);
    return;
  }
  const std::string expected = read_file(path);
  if (expected == actual) {
    SUCCEED();
    return;
  }
  // Point at the first line that differs.
  std::istringstream e(expected), a(actual);
  std::string le, la;
  int line = 0;
  while (true) {
    ++line;
    const bool more_e = static_cast<bool>(std::getline(e, le));
    const bool more_a = static_cast<bool>(std::getline(a, la));
    if (!more_e && !more_a) break;
    if (!more_e) le = "<end of file>";
    if (!more_a) la = "<end of kernel>";
    if (le != la || !more_e || !more_a) break;
  }
  FAIL("generated kernel differs from "
       << path << " at line " << line << ":\n  golden:    " << le << "\n  generated: " << la
       << "\nIf the change is intended, rerun with FUSEJIT_UPDATE_GOLDEN=1 "
          "and review `git diff test/templates/golden`.");
}

}  // namespace

TEST_CASE("golden: elementwise chain relu(x * w + b) f32 [64 256]", "[templates][golden]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {64, 256});
  const NodeId w = add_input(g, DType::f32, {64, 256});
  const NodeId b = add_input(g, DType::f32, {256});
  g.add_output(add_unary(g, Op::relu, add_binary(g, Op::add, add_binary(g, Op::mul, x, w), b)));
  check_golden("ew_chain_f32", test::compile_graph(g, RegionKind::pointwise));
}

TEST_CASE("golden: row softmax bf16 [8 1024]", "[templates][golden]") {
  Graph g;
  const NodeId x = add_input(g, DType::bf16, {8, 1024});
  const NodeId m = add_reduce(g, Op::max, x, {1}, true);
  const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, x, m));
  const NodeId s = add_reduce(g, Op::sum, e, {1}, true);
  g.add_output(add_binary(g, Op::div, e, s));
  check_golden("softmax_bf16", test::compile_graph(g, RegionKind::normalization));
}

TEST_CASE("golden: column sum f32 [1024 512] over axis 0", "[templates][golden]") {
  Graph g;
  const NodeId x = add_input(g, DType::f32, {1024, 512});
  g.add_output(add_reduce(g, Op::sum, x, {0}, false));
  check_golden("column_sum_f32", test::compile_graph(g, RegionKind::reduction));
}

TEST_CASE("golden: column softmax statistics bf16 [1024 512] over axis 0", "[templates][golden]") {
  // max(x) and sum(exp(x - max)) down the columns, accumulated online in one pass: the first of
  // column softmax's two kernels (the partitioner recomputes exp(x - max) in the second).
  Graph g;
  const NodeId x = add_cast(g, add_input(g, DType::bf16, {1024, 512}), DType::f32);
  const NodeId m = add_reduce(g, Op::max, x, {0}, true);
  const NodeId e = add_unary(g, Op::exp, add_binary(g, Op::sub, x, m));
  g.set_outputs({m, add_reduce(g, Op::sum, e, {0}, true)});
  check_golden("column_softmax_stats_bf16", test::compile_graph(g, RegionKind::reduction));
}

TEST_CASE("golden: attention bf16 d64 causal, k and v shared by head pairs, q [b s h d]",
          "[templates][golden][attention]") {
  templates::AttentionSpec s;
  s.dtype = DType::bf16;
  s.batch = 2;
  s.heads = 8;
  s.seq_q = 200;
  s.seq_kv = 200;
  s.q.strides = {200 * 8 * 64, 64, 8 * 64, 1};
  s.k.strides = s.v.strides = {4 * 200 * 64, 200 * 64, 64, 1};
  s.k.head_group = s.v.head_group = 2;
  s.scale = 0.125;
  s.mask = templates::AttentionMaskKind::causal;
  check_golden("attention_bf16_d64_causal", templates::generate_attention(s));
}
