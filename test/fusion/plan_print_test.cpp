// The plan as JSON and as text.
#include <cctype>
#include <string>

#include "fusion/partition.h"
#include "fusion/pipeline.h"
#include "fusion/plan_print.h"
#include "ir/text.h"
#include "workloads.h"

using namespace fusejit;
using namespace fusejit::fusion;
using namespace fusejit::fusion::test;

namespace {

// A strict recursive-descent check that `s` is one JSON value (RFC 8259), nothing else.
class JsonChecker {
 public:
  explicit JsonChecker(const std::string& s) : s_(s) {}
  bool valid() {
    skip();
    if (!value()) return false;
    skip();
    return i_ == s_.size();
  }

 private:
  bool value() {
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') return string();
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return number();
    return word("true") || word("false") || word("null");
  }
  bool object() {
    ++i_;
    skip();
    if (eat('}')) return true;
    do {
      skip();
      if (!string()) return false;
      skip();
      if (!eat(':')) return false;
      skip();
      if (!value()) return false;
      skip();
    } while (eat(','));
    return eat('}');
  }
  bool array() {
    ++i_;
    skip();
    if (eat(']')) return true;
    do {
      skip();
      if (!value()) return false;
      skip();
    } while (eat(','));
    return eat(']');
  }
  bool string() {
    if (!eat('"')) return false;
    while (i_ < s_.size() && s_[i_] != '"') {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c < 0x20) return false;
      if (c == '\\') {
        ++i_;
        if (i_ >= s_.size()) return false;
        const char e = s_[i_];
        if (e == 'u') {
          for (int k = 0; k < 4; ++k) {
            if (++i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_])))
              return false;
          }
        } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
          return false;
        }
      }
      ++i_;
    }
    return eat('"');
  }
  bool number() {
    const size_t start = i_;
    eat('-');
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) ||
                              std::string_view(".eE+-").find(s_[i_]) != std::string_view::npos)) {
      ++i_;
    }
    return i_ > start && std::isdigit(static_cast<unsigned char>(s_[i_ - 1]));
  }
  bool word(std::string_view w) {
    if (s_.compare(i_, w.size(), w) != 0) return false;
    i_ += w.size();
    return true;
  }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  const std::string& s_;
  size_t i_ = 0;
};

bool valid_json(const std::string& s) { return JsonChecker(s).valid(); }

size_t count_of(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("the JSON checker itself rejects malformed text", "[fusion][json]") {
  CHECK(valid_json(R"({"a":[1,-2.5e3,true,null,"x\"y\n"],"b":{}})"));
  CHECK_FALSE(valid_json(R"({"a":1,})"));
  CHECK_FALSE(valid_json(R"({"a":"line
break"})"));
  CHECK_FALSE(valid_json(R"({"a":1} x)"));
  CHECK_FALSE(valid_json(R"({"a":nan})"));
}

TEST_CASE("plan JSON is well-formed, ordered, and its counts match", "[fusion][json]") {
  const Plan plan = make_plan(gemm_bias_relu(DType::bf16));
  const std::string json = plan_to_json(plan);
  INFO(json);
  REQUIRE(valid_json(json));
  CHECK(json.rfind(R"({"kernels":0,"library_calls":1,"regions":[)", 0) == 0);
  CHECK(count_of(json, R"("kind":)") == plan.regions.size());
  CHECK(count_of(json, R"("kind":"gemm")") == 1);
  CHECK(
      json.find(
          R"("kind":"gemm","ops":["matmul","add","relu"],"inputs":["%0","%1","%2"],"outputs":["%5"],"shape":[64,256],"epilogue":{"bias":"%2","activation":"relu","alpha":1,"beta":0,"residual":null,"transpose_a":false,"transpose_b":false,"batch_a":[],"batch_b":[],"refusals":[]}})") !=
      std::string::npos);
  CHECK(count_of(json, R"("producer":)") == plan.decisions.size());
  CHECK(
      json.find(
          R"({"producer":"%3","consumer":"%4","fused":true,"reason":"folded into the cuBLASLt epilogue of matmul %3: bias %2)") !=
      std::string::npos);
  CHECK(json.find(R"("decisions":[)") > json.find(R"("regions":[)"));

  // Folding disabled: the add and relu are a kernel, and the epilogue says why.
  const std::string off =
      plan_to_json(make_plan(gemm_bias_relu(DType::bf16), PlanOptions{.epilogue = false}));
  INFO(off);
  REQUIRE(valid_json(off));
  CHECK(off.rfind(R"({"kernels":1,"library_calls":1,"regions":[)", 0) == 0);
  CHECK(
      off.find(
          R"js("kind":"gemm","ops":["matmul"],"inputs":["%0","%1"],"outputs":["%3"],"shape":[64,256],"epilogue":{"bias":null,"activation":"none","alpha":1,"beta":0,"residual":null,"transpose_a":false,"transpose_b":false,"batch_a":[],"batch_b":[],"refusals":["epilogue folding disabled (FUSEJIT_DISABLE=epilogue)"]}})js") !=
      std::string::npos);
  CHECK(off.find(R"("ops":["add","relu"])") != std::string::npos);
  CHECK(
      off.find(
          R"js({"producer":"%3","consumer":"%4","fused":false,"reason":"matmul %3 is a library call: what follows starts a new region (epilogue folding disabled (FUSEJIT_DISABLE=epilogue))"})js") !=
      std::string::npos);

  // Alpha, beta and the residual, as numbers and ids.
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, 128}),
               w = ir::add_input(g, DType::f32, {128, C});
  const NodeId r = ir::add_input(g, DType::f32, {R, C});
  const NodeId ax = bin(g, Op::mul, ir::add_matmul(g, x, w), scalar(g, DType::f32, 0.5));
  g.add_output(bin(g, Op::add, ax, bin(g, Op::mul, r, scalar(g, DType::f32, 2.0))));
  const std::string res = plan_to_json(make_plan(g));
  INFO(res);
  REQUIRE(valid_json(res));
  CHECK(res.find(R"("inputs":["%0","%1","%2"])") != std::string::npos);
  CHECK(res.find(R"("bias":null,"activation":"none","alpha":0.5,"beta":2,"residual":"%2")") !=
        std::string::npos);

  const std::string norm = plan_to_json(make_plan(layernorm(DType::f32, true)));
  REQUIRE(valid_json(norm));
  CHECK(norm.find(R"("kind":"normalization")") != std::string::npos);
  CHECK(norm.find(R"("shape":[64,256],"reduce_axes":[1])") != std::string::npos);
}

TEST_CASE("plan JSON of a column softmax: recomputed values in both regions' ops",
          "[fusion][json]") {
  // softmax over axis 0 of f32[R,C]: %1 = max, %2 = sub, %3 = exp, %4 = sum, %5 = div.
  Graph g;
  g.add_output(softmax_of(g, ir::add_input(g, DType::f32, {R, C}), 0));
  const std::string json = plan_to_json(make_plan(g));
  INFO(json);
  REQUIRE(valid_json(json));
  CHECK(json.rfind(R"({"kernels":2,"library_calls":0,"regions":[)", 0) == 0);
  CHECK(json.find(
            R"({"kind":"reduction","ops":["max","sub","exp","sum"],"inputs":["%0"],"outputs":["%1","%4"],"shape":[64,256],"reduce_axes":[0]})") !=
        std::string::npos);
  CHECK(json.find(
            R"({"kind":"pointwise","ops":["sub","exp","div"],"inputs":["%0","%1","%4"],"outputs":["%5"],"shape":[64,256]})") !=
        std::string::npos);
  CHECK(json.find(
            R"({"producer":"%3","consumer":"%5","fused":true,"reason":"recompute %3 in region 1: exp f32[64,256] is evaluated from %0, %1 (2 ops) in regions 0, 1, never written; recomputing %2, %3 took the plan from 4 kernels and)") !=
        std::string::npos);
}

TEST_CASE("plan JSON escapes strings and writes missing ids as null", "[fusion][json]") {
  Plan plan;
  const NodeId x = ir::add_input(plan.graph, DType::f32, {4});
  plan.graph.add_output(x);
  plan.decisions.push_back({x, -1, false, "a \"quoted\"\\ reason\nwith a tab\t and \x01"});
  const std::string json = plan_to_json(plan);
  INFO(json);
  CHECK(valid_json(json));
  CHECK(json.find(R"("producer":"%0","consumer":null)") != std::string::npos);
  CHECK(json.find(R"(a \"quoted\"\\ reason\nwith a tab\t and \u0001)") != std::string::npos);
  CHECK(json.rfind(R"({"kernels":0,"library_calls":0,"regions":[],)", 0) == 0);
}

TEST_CASE("plan and decisions print as text", "[fusion][json]") {
  const Plan plan = make_plan(naive_softmax(DType::f32));
  const std::string text = plan_to_text(plan);
  INFO(text);
  CHECK(text.rfind("plan: 1 kernel, 0 library calls\n", 0) == 0);
  CHECK(text.find("region 0: normalization [64,256] reduce axes [1] (kernel)") !=
        std::string::npos);
  CHECK(text.find("%1 : f32[64,1] = max %0 axes=[1] keepdim") != std::string::npos);
  const std::string why = decisions_to_text(plan);
  CHECK(why.find("fused %1 -> %2: normalization over axes [1] of [64,256]") != std::string::npos);
  CHECK(text.find(why) != std::string::npos);

  const std::string gemm = plan_to_text(make_plan(two_gemm_mul(DType::f32)));
  CHECK(gemm.rfind("plan: 1 kernel, 2 library calls\n", 0) == 0);
  CHECK(gemm.find("gemm [64,256] (library call)") != std::string::npos);
  CHECK(gemm.find("epilogue: none") != std::string::npos);
  CHECK(gemm.find("  not folded: mul %5 multiplies by %4, not a scalar constant") !=
        std::string::npos);

  const std::string folded = plan_to_text(make_plan(gemm_bias_gelu(DType::bf16)));
  INFO(folded);
  CHECK(folded.rfind("plan: 0 kernels, 1 library call\n", 0) == 0);
  CHECK(folded.find("  inputs:  %0 %1 %2\n  outputs: %5\n  epilogue: bias %2, gelu_tanh\n") !=
        std::string::npos);
  CHECK(folded.find("%5 : bf16[64,256] = gelu_tanh %4") != std::string::npos);
}

TEST_CASE("the plan prints a node as the trace does, a scalar permute included",
          "[fusion][plan_print]") {
  Graph g;
  const NodeId s = ir::add_input(g, DType::f32, {});
  g.add_output(un(g, Op::exp, ir::add_permute(g, s, {})));
  const Plan plan = partition(g);  // no passes: simplification would drop the identity permute
  REQUIRE(plan.regions.at(0).nodes.size() == 2);
  const std::string trace = ir::print(plan.graph);
  const std::string text = plan_to_text(plan);
  for (NodeId id : plan.regions.at(0).nodes) {
    const std::string line = ir::node_line(plan.graph, id);
    INFO(line);
    CHECK(trace.find(line + "\n") != std::string::npos);
    CHECK(text.find("    " + line + "\n") != std::string::npos);
  }
}
