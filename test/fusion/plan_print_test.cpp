// The plan as JSON and as text. The JSON is read with nlohmann::json, keys kept in the order
// written (ordered_json, whose objects compare equal only with their keys in the same order).
#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fusion/partition.h"
#include "fusion/pipeline.h"
#include "fusion/plan_print.h"
#include "ir/text.h"
#include "workloads.h"

using namespace fusejit;
using namespace fusejit::fusion;
using namespace fusejit::fusion::test;

namespace {

using Json = nlohmann::ordered_json;

// `text` as one JSON value; nlohmann refuses malformed text and anything after the value.
Json parsed(const std::string& text) {
  INFO(text);
  REQUIRE(Json::accept(text));
  return Json::parse(text);
}

std::vector<std::string> keys_of(const Json& object) {
  std::vector<std::string> keys;
  for (auto it = object.begin(); it != object.end(); ++it) keys.push_back(it.key());
  return keys;
}

const std::vector<std::string> kPlanKeys = {"kernels", "library_calls", "regions", "decisions"};
const std::vector<std::string> kDecisionKeys = {"producer", "consumer", "fused", "reason"};

// The one element of `array` for which `pred` holds.
template <class Pred>
Json the_one(const Json& array, Pred pred) {
  std::vector<Json> found;
  std::copy_if(array.begin(), array.end(), std::back_inserter(found), pred);
  REQUIRE(found.size() == 1);
  return found[0];
}

Json region_of_kind(const Json& plan, const std::string& kind) {
  return the_one(plan.at("regions"), [&](const Json& r) { return r.at("kind") == kind; });
}

Json decision(const Json& plan, const std::string& producer, const std::string& consumer) {
  return the_one(plan.at("decisions"), [&](const Json& d) {
    return d.at("producer") == producer && d.at("consumer") == consumer;
  });
}

// The plan's counts and keys agree with `plan`: one JSON region per region, one decision per
// decision, each decision with its four keys in order.
void check_counts(const Json& j, const Plan& plan) {
  CHECK(keys_of(j) == kPlanKeys);
  CHECK(j.at("regions").size() == plan.regions.size());
  CHECK(j.at("decisions").size() == plan.decisions.size());
  CHECK(j.at("kernels").get<size_t>() + j.at("library_calls").get<size_t>() ==
        plan.regions.size());
  for (const Json& d : j.at("decisions")) CHECK(keys_of(d) == kDecisionKeys);
}

}  // namespace

TEST_CASE("ordered JSON objects compare their keys' order", "[fusion][json]") {
  // What the exact region checks below rely on.
  CHECK(Json::parse(R"({"a":1,"b":[true,null]})") ==
        Json::parse(R"({ "a": 1, "b": [true, null] })"));
  CHECK(Json::parse(R"({"a":1,"b":2})") != Json::parse(R"({"b":2,"a":1})"));
  CHECK_FALSE(Json::accept(R"({"a":1,})"));
  CHECK_FALSE(Json::accept(R"({"a":1} x)"));
  CHECK_FALSE(Json::accept(R"({"a":nan})"));
}

TEST_CASE("plan JSON is well-formed, ordered, and its counts match", "[fusion][json]") {
  const Plan plan = make_plan(gemm_bias_relu(DType::bf16));
  const Json j = parsed(plan_to_json(plan));
  INFO(j.dump());
  check_counts(j, plan);
  CHECK(j.at("kernels") == 0);
  CHECK(j.at("library_calls") == 1);
  REQUIRE(j.at("regions").size() == 1);
  CHECK(j.at("regions").at(0) == Json::parse(R"(
      {"kind":"gemm","ops":["matmul","add","relu"],"inputs":["%0","%1","%2"],"outputs":["%5"],
       "shape":[64,256],
       "types":{"%0":"bf16[64,128]","%1":"bf16[128,256]","%2":"bf16[256]","%5":"bf16[64,256]"},
       "epilogue":{"bias":"%2","activation":"relu","alpha":1,"beta":0,"residual":null,
                   "transpose_a":false,"transpose_b":false,"batch_a":[],"batch_b":[],
                   "int8_b":false,"scale":null,"refusals":[]}})"));
  const Json bias = decision(j, "%3", "%4");
  CHECK(bias.at("fused") == true);
  CHECK(bias.at("reason").get<std::string>().starts_with(
      "folded into the cuBLASLt epilogue of matmul %3: bias %2"));

  // Folding disabled: the add and relu are a kernel, and the epilogue says why.
  const Plan off_plan = make_plan(gemm_bias_relu(DType::bf16), PlanOptions{.epilogue = false});
  const Json off = parsed(plan_to_json(off_plan));
  INFO(off.dump());
  check_counts(off, off_plan);
  CHECK(off.at("kernels") == 1);
  CHECK(off.at("library_calls") == 1);
  CHECK(region_of_kind(off, "gemm") == Json::parse(R"js(
      {"kind":"gemm","ops":["matmul"],"inputs":["%0","%1"],"outputs":["%3"],"shape":[64,256],
       "types":{"%0":"bf16[64,128]","%1":"bf16[128,256]","%3":"bf16[64,256]"},
       "epilogue":{"bias":null,"activation":"none","alpha":1,"beta":0,"residual":null,
                   "transpose_a":false,"transpose_b":false,"batch_a":[],"batch_b":[],
                   "int8_b":false,"scale":null,"refusals":["epilogue folding disabled (FUSEJIT_DISABLE=epilogue)"]}})js"));
  CHECK(the_one(off.at("regions"), [](const Json& r) { return r.at("kind") != "gemm"; })
            .at("ops") == Json::parse(R"(["add","relu"])"));
  const Json library = decision(off, "%3", "%4");
  CHECK(library.at("fused") == false);
  CHECK(library.at("reason") ==
        "matmul %3 is a library call: what follows starts a new region (epilogue folding "
        "disabled (FUSEJIT_DISABLE=epilogue))");

  // Alpha, beta and the residual, as numbers and ids.
  Graph g;
  const NodeId x = ir::add_input(g, DType::f32, {R, 128}),
               w = ir::add_input(g, DType::f32, {128, C});
  const NodeId r = ir::add_input(g, DType::f32, {R, C});
  const NodeId ax = bin(g, Op::mul, ir::add_matmul(g, x, w), scalar(g, DType::f32, 0.5));
  g.add_output(bin(g, Op::add, ax, bin(g, Op::mul, r, scalar(g, DType::f32, 2.0))));
  const Plan res_plan = make_plan(g);
  const Json res = parsed(plan_to_json(res_plan));
  INFO(res.dump());
  check_counts(res, res_plan);
  const Json gemm = region_of_kind(res, "gemm");
  CHECK(gemm.at("inputs") == Json::parse(R"(["%0","%1","%2"])"));
  const Json& epilogue = gemm.at("epilogue");
  const std::vector<std::string> epilogue_keys = keys_of(epilogue);
  REQUIRE(epilogue_keys.size() >= 5);
  CHECK(std::vector<std::string>(epilogue_keys.begin(), epilogue_keys.begin() + 5) ==
        std::vector<std::string>{"bias", "activation", "alpha", "beta", "residual"});
  CHECK(epilogue.at("bias").is_null());
  CHECK(epilogue.at("activation") == "none");
  CHECK(epilogue.at("alpha") == 0.5);
  CHECK(epilogue.at("beta") == 2);
  CHECK(epilogue.at("residual") == "%2");
  // A whole number is written as an integer (2, not 2.0).
  CHECK(plan_to_json(res_plan).find(R"("alpha":0.5,"beta":2,)") != std::string::npos);

  const Plan norm_plan = make_plan(layernorm(DType::f32, true));
  const Json norm = parsed(plan_to_json(norm_plan));
  INFO(norm.dump());
  check_counts(norm, norm_plan);
  const Json region = region_of_kind(norm, "normalization");
  const std::vector<std::string> keys = keys_of(region);
  const auto shape = std::find(keys.begin(), keys.end(), "shape");
  REQUIRE(shape + 2 < keys.end());
  CHECK(*(shape + 1) == "types");
  CHECK(*(shape + 2) == "reduce_axes");
  // Types by id, inputs then outputs: here x, the gain and the bias in, the normalized rows out.
  CHECK(region.at("types").size() == region.at("inputs").size() + region.at("outputs").size());
  CHECK(region.at("types").at(region.at("inputs").at(0).get<std::string>()) == "f32[64,256]");
  CHECK(region.at("shape") == Json::parse("[64,256]"));
  CHECK(region.at("reduce_axes") == Json::parse("[1]"));
}

TEST_CASE("plan JSON of a column softmax: recomputed values in both regions' ops",
          "[fusion][json]") {
  // softmax over axis 0 of f32[R,C]: %1 = max, %2 = sub, %3 = exp, %4 = sum, %5 = div.
  Graph g;
  g.add_output(softmax_of(g, ir::add_input(g, DType::f32, {R, C}), 0));
  const Plan plan = make_plan(g);
  const Json j = parsed(plan_to_json(plan));
  INFO(j.dump());
  check_counts(j, plan);
  CHECK(j.at("kernels") == 2);
  CHECK(j.at("library_calls") == 0);
  CHECK(region_of_kind(j, "reduction") == Json::parse(R"(
      {"kind":"reduction","ops":["max","sub","exp","sum"],"inputs":["%0"],"outputs":["%1","%4"],
       "shape":[64,256],"types":{"%0":"f32[64,256]","%1":"f32[1,256]","%4":"f32[1,256]"},
       "reduce_axes":[0]})"));
  CHECK(region_of_kind(j, "pointwise") == Json::parse(R"(
      {"kind":"pointwise","ops":["sub","exp","div"],"inputs":["%0","%1","%4"],"outputs":["%5"],
       "shape":[64,256],
       "types":{"%0":"f32[64,256]","%1":"f32[1,256]","%4":"f32[1,256]","%5":"f32[64,256]"}})"));
  const Json recompute = decision(j, "%3", "%5");
  CHECK(recompute.at("fused") == true);
  CHECK(recompute.at("reason").get<std::string>().starts_with(
      "recompute %3 in region 1: exp f32[64,256] is evaluated from %0, %1 (2 ops) in regions 0, "
      "1, never written; recomputing %2, %3 took the plan from 4 kernels and"));
}

TEST_CASE("plan JSON escapes strings and writes missing ids as null", "[fusion][json]") {
  Plan plan;
  const NodeId x = ir::add_input(plan.graph, DType::f32, {4});
  plan.graph.add_output(x);
  const std::string reason = "a \"quoted\"\\ reason\nwith a tab\t and \x01";
  plan.decisions.push_back({x, -1, false, reason});
  const std::string text = plan_to_json(plan);
  INFO(text);
  const Json j = parsed(text);
  check_counts(j, plan);
  CHECK(j.at("kernels") == 0);
  CHECK(j.at("library_calls") == 0);
  CHECK(j.at("regions") == Json::array());
  REQUIRE(j.at("decisions").size() == 1);
  const Json& d = j.at("decisions").at(0);
  CHECK(d.at("producer") == "%0");
  CHECK(d.at("consumer").is_null());
  CHECK(d.at("fused") == false);
  CHECK(d.at("reason") == reason);  // every character back, the control ones included
  // Control characters as the short escapes where JSON has them, else \u00XX.
  CHECK(text.find(R"(a \"quoted\"\\ reason\nwith a tab\t and \u0001)") != std::string::npos);

  // Bytes that are not UTF-8 become U+FFFD, so the document stays valid JSON.
  plan.decisions.push_back({x, -1, false, "bad \xff byte"});
  CHECK(parsed(plan_to_json(plan)).at("decisions").at(1).at("reason") == "bad \xef\xbf\xbd byte");
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
