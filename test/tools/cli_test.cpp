// The fusejit CLI, run as a user runs it: `plan --json` on the seed traces (the fusion
// contract: kernels, library calls, outputs per region, read with nlohmann::json), --help and
// --version, and the exit statuses: 2 with a clear message for a bad command line, 1 for a
// failure.
#include <algorithm>
#include <array>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "fusejit_test_paths.h"
#include "support/catch.h"
#include "support/cli_env.h"

namespace {

struct Result {
  int status = -1;
  std::string out;  // stdout and stderr
};

// `redirect` says which streams come back (default both, as a person sees them). The binary
// runs in an environment of its own (support/cli_env.h); `env` adds to it.
Result run(const std::string& args, const std::string& env = "",
           const std::string& redirect = "2>&1") {
  const std::string cmd = fusejit::testing::isolated_cli_env() + " " + env + " " FUSEJIT_CLI " " +
                          args + " " + redirect;
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string trace(const std::string& name) {
  return std::string(FUSEJIT_SOURCE_DIR) + "/examples/traces/" + name + ".trace";
}

// `fusejit plan --json ARGS`, parsed: stdout alone, which must be one JSON object. Json is
// nlohmann::ordered_json to keep the keys in the order written.
template <class Json = nlohmann::json>
Json plan_json(const std::string& args) {
  const Result r = run("plan --json " + args, "", "2>/dev/null");
  INFO("plan --json " << args << ": " << r.out);
  REQUIRE(r.status == 0);
  Json plan = Json::parse(r.out);
  REQUIRE(plan.is_object());
  return plan;
}

// The regions of a plan of the given kind.
std::vector<nlohmann::json> regions_of_kind(const nlohmann::json& plan, const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& r : plan.at("regions")) {
    if (r.at("kind") == kind) out.push_back(r);
  }
  return out;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("plan --json: each memory-bound seed workload is one kernel", "[tools][plan]") {
  for (const char* name : {"ew_chain", "long_chain", "bias_gelu", "naive_softmax", "softmax",
                           "layernorm", "rmsnorm", "sumsq", "add_layernorm"}) {
    for (const char* dtype : {"f32", "bf16"}) {
      const std::string file = std::string(name) + "_" + dtype;
      INFO(file);
      const nlohmann::json plan = plan_json(trace(file));
      CHECK(plan.at("kernels") == 1);
      CHECK(plan.at("library_calls") == 0);
      REQUIRE(plan.at("regions").size() == 1);
      const nlohmann::json& region = plan.at("regions").at(0);
      CHECK(region.at("kind") != "gemm");
      CHECK_FALSE(region.at("ops").empty());
      CHECK_FALSE(region.at("inputs").empty());
      CHECK_FALSE(region.at("outputs").empty());
      CHECK_FALSE(region.contains("epilogue"));
    }
  }
}

TEST_CASE("plan --json: add_layernorm writes both outputs from one kernel", "[tools][plan]") {
  const nlohmann::json plan = plan_json(trace("add_layernorm_f32"));
  REQUIRE(plan.at("regions").size() == 1);
  const nlohmann::json& region = plan.at("regions").at(0);
  CHECK(region.at("kind") == "normalization");
  const nlohmann::json& outputs = region.at("outputs");
  REQUIRE(outputs.size() == 2);
  for (const nlohmann::json& o : outputs) CHECK(o.get<std::string>().starts_with("%"));
}

TEST_CASE("plan --json: each kernel region names its schedule and why others refused",
          "[tools][plan]") {
  SECTION("softmax rows: the row scheduler, after the three that refuse") {
    const nlohmann::ordered_json plan =
        plan_json<nlohmann::ordered_json>(trace("softmax_f32"));
    const nlohmann::ordered_json& region = plan.at("regions").at(0);
    REQUIRE(region.contains("schedule"));
    CHECK((--region.end()).key() == "schedule");  // added after the region's other fields
    const nlohmann::ordered_json& s = region.at("schedule");
    CHECK(s.at("scheduler") == "rows");
    CHECK(s.at("params").at("register_cache") == true);
    CHECK(s.at("params").at("cluster") == 1);
    REQUIRE(s.at("refused").size() == 3);
    CHECK(s.at("refused").at(2).at("scheduler") == "column");
    CHECK(s.at("refused").at(2).at("reason") == "the reduced axes are the trailing ones");
  }
  SECTION("an elementwise chain: the linear sweep") {
    const nlohmann::json s = plan_json(trace("ew_chain_bf16")).at("regions").at(0).at("schedule");
    CHECK(s.at("scheduler") == "pointwise");
    CHECK(s.at("params").at("vector_widths") == nlohmann::json::array({8}));
    REQUIRE(s.at("refused").size() == 1);
    CHECK(s.at("refused").at(0).at("scheduler") == "tiled_transpose");
  }
  SECTION("an attention region: the attention scheduler, after the four that refuse") {
    const Result r = run("plan --json " + std::string(FUSEJIT_SOURCE_DIR) +
                             "/test/traces/attention/gqa_causal_2x8x65_d128_bf16.trace",
                         "FUSEJIT_ATTENTION=kernel", "2>/dev/null");
    REQUIRE(r.status == 0);
    const nlohmann::json plan = nlohmann::json::parse(r.out);
    const std::vector<nlohmann::json> regions = regions_of_kind(plan, "attention");
    REQUIRE(regions.size() == 1);
    const nlohmann::json& s = regions[0].at("schedule");
    CHECK(s.at("scheduler") == "attention");
    CHECK(s.at("params").at("head_dim") == 128);
    CHECK(s.at("params").at("mask") == "causal");
    CHECK(s.at("params").at("k_head_group") == 4);
    REQUIRE(s.at("refused").size() == 4);
    CHECK(s.at("refused").at(3).at("reason") == "not a reduction or normalization region");
  }
  SECTION(
      "an attention over a fused projection: one buffer read three times, the output "
      "written through its permute") {
    const Result r = run("plan --json " + std::string(FUSEJIT_SOURCE_DIR) +
                             "/test/traces/attention/qkvslices_2x3x50_d64_bf16.trace",
                         "FUSEJIT_ATTENTION=kernel", "2>/dev/null");
    REQUIRE(r.status == 0);
    const nlohmann::json plan = nlohmann::json::parse(r.out);
    REQUIRE(plan.at("regions").size() == 1);
    const nlohmann::json& region = plan.at("regions").at(0);
    CHECK(region.at("kind") == "attention");
    CHECK(region.at("inputs") == nlohmann::json::array({"%0", "%0", "%0"}));
    CHECK(region.at("attention").at("written") == region.at("outputs").at(0));
    CHECK(region.at("attention").at("output") != region.at("attention").at("written"));
  }
  SECTION("library calls have none") {
    const nlohmann::json plan = plan_json(trace("gemm_bias_relu_bf16"));
    for (const nlohmann::json& r : regions_of_kind(plan, "gemm")) CHECK(!r.contains("schedule"));
  }
}

// Every *.trace under `folder` of the source tree, sorted.
std::vector<std::filesystem::path> traces_in(const std::string& folder) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(std::string(FUSEJIT_SOURCE_DIR) + "/" +
                                                           folder)) {
    if (e.path().extension() == ".trace") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The plan's object with its keys in the order written: the counts come first, so that a
// reader of the stream sees them before the regions.
nlohmann::ordered_json ordered_plan_json(const std::filesystem::path& trace) {
  nlohmann::ordered_json plan = plan_json<nlohmann::ordered_json>(trace.string());
  REQUIRE(plan.size() >= 3);
  auto key = plan.begin();
  CHECK(key.key() == "kernels");
  CHECK((++key).key() == "library_calls");
  CHECK((++key).key() == "regions");
  CHECK(plan.at("kernels").get<size_t>() + plan.at("library_calls").get<size_t>() ==
        plan.at("regions").size());
  return plan;
}

TEST_CASE("plan --json: each index trace (slice, concat, arange) is one kernel", "[tools][plan]") {
  // test/traces/index/: hand-written traces of the rotary embedding and SwiGLU's split.
  const std::vector<std::filesystem::path> traces = traces_in("test/traces/index");
  REQUIRE(traces.size() >= 2);
  for (const std::filesystem::path& t : traces) {
    INFO(t.string());
    const nlohmann::ordered_json plan = ordered_plan_json(t);
    CHECK(plan.at("kernels") == 1);
    CHECK(plan.at("library_calls") == 0);
  }
}

TEST_CASE("plan --json: every layout trace plans", "[tools][plan]") {
  // bench/traces/: the layout suite that bench/make_layout_traces.py writes.
  const std::vector<std::filesystem::path> traces = traces_in("bench/traces");
  REQUIRE(traces.size() >= 10);
  for (const std::filesystem::path& t : traces) {
    INFO(t.string());
    const nlohmann::ordered_json plan = ordered_plan_json(t);
    CHECK(plan.at("kernels").get<size_t>() + plan.at("library_calls").get<size_t>() >= 1);
  }
}

TEST_CASE("plan --json: GEMMs are library calls that absorb their epilogues", "[tools][plan]") {
  struct Expect {
    const char* name;
    int kernels, calls;
    const char* activation;  // of the first GEMM's epilogue
    bool bias;               // the first GEMM's epilogue adds a bias
  };
  for (const Expect& e : {Expect{"gemm_bias_relu_bf16", 0, 1, "relu", true},
                          Expect{"gemm_bias_gelu_bf16", 0, 1, "gelu_tanh", true},
                          Expect{"gemm_layernorm_bf16", 1, 1, "none", true},
                          Expect{"two_gemm_mul_bf16", 1, 2, "none", false},
                          Expect{"mlp_bf16", 0, 2, "gelu_tanh", true}}) {
    INFO(e.name);
    const nlohmann::json plan = plan_json(trace(e.name));
    CHECK(plan.at("kernels") == e.kernels);
    CHECK(plan.at("library_calls") == e.calls);
    const std::vector<nlohmann::json> gemms = regions_of_kind(plan, "gemm");
    REQUIRE(gemms.size() == static_cast<size_t>(e.calls));
    for (const nlohmann::json& g : gemms) {
      INFO(g.dump());
      CHECK(g.at("ops").at(0) == "matmul");
      REQUIRE(g.contains("epilogue"));
    }
    const nlohmann::json& epilogue = gemms.front().at("epilogue");
    CHECK(epilogue.at("activation") == e.activation);
    CHECK(epilogue.at("bias").is_string() == e.bias);
    if (e.bias) CHECK(epilogue.at("bias").get<std::string>().starts_with("%"));
  }
  // gemm_layernorm: the kernel after the GEMM is the normalization.
  CHECK(regions_of_kind(plan_json(trace("gemm_layernorm_bf16")), "normalization").size() == 1);
  // mlp: both calls carry a bias.
  for (const nlohmann::json& g : regions_of_kind(plan_json(trace("mlp_bf16")), "gemm")) {
    CHECK(g.at("epilogue").at("bias").is_string());
  }
}

TEST_CASE("plan: the plain-text plan names regions and reasons", "[tools][plan]") {
  const Result r = run("plan " + trace("two_gemm_mul_bf16"));
  REQUIRE(r.status == 0);
  CHECK(r.out.find("gemm") != std::string::npos);
  CHECK(r.out.find("pointwise") != std::string::npos);
}

TEST_CASE("plan: a batched matmul broadcast on both sides is strided cuBLASLt calls",
          "[tools][plan]") {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("fusejit_cli_test_broadcast_gemm_" + std::to_string(getpid()) + ".trace"))
          .string();
  std::ofstream(path) << "fusejit-trace 1\n"
                         "%0 : bf16[8,1,512,64] = input\n"
                         "%1 : bf16[1,16,64,512] = input\n"
                         "%2 : bf16[8,16,512,512] = matmul %0, %1\n"
                         "output %2\n";
  const nlohmann::json plan = plan_json(path);
  CHECK(plan.at("kernels") == 0);
  CHECK(plan.at("library_calls") == 1);
  REQUIRE(plan.at("regions").size() == 1);
  const nlohmann::json& epilogue = plan.at("regions").at(0).at("epilogue");
  CHECK(epilogue.at("batch_a") == nlohmann::json::array({8, 1}));
  CHECK(epilogue.at("batch_b") == nlohmann::json::array({1, 16}));
  const Result r = run("plan " + path);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("region 0: cublasLt 512x512x64 x16 (8 calls) bf16, batch strides A 0 B 32768 "
                   "D 262144") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("a failure exits 1 and says which command failed and why", "[tools][errors]") {
  Result r = run("plan /nonexistent/x.trace");
  CHECK(r.status == 1);
  CHECK(r.out.find("fusejit plan: error: ") != std::string::npos);
  CHECK(r.out.find("/nonexistent/x.trace") != std::string::npos);

  const std::string bad = (std::filesystem::temp_directory_path() /
                           ("fusejit_cli_test_bad_" + std::to_string(getpid()) + ".trace"))
                              .string();
  std::ofstream(bad) << "fusejit-trace 1\n%0 : f32[4] = input\n%1 : f32[4] = mull %0, %0\noutput %1\n";
  r = run("plan " + bad);
  CHECK(r.status == 1);
  CHECK(r.out.find(bad + ":3:") != std::string::npos);
  CHECK(r.out.find("mull") != std::string::npos);
  std::filesystem::remove(bad);

  // A bad environment is the library's error, not the command line's.
  r = run("plan " + trace("ew_chain_f32"), "FUSEJIT_LOG=loud");
  CHECK(r.status == 1);
  CHECK(r.out.find("fusejit plan: error: ") != std::string::npos);
  CHECK(r.out.find("FUSEJIT_LOG=loud") != std::string::npos);
}

TEST_CASE("run without a GPU says so instead of crashing", "[tools][errors]") {
  const Result r = run("run " + trace("ew_chain_f32"), "CUDA_VISIBLE_DEVICES=");
  CHECK(r.status == 1);
  CHECK(r.out.find("fusejit run: error: no GPU") != std::string::npos);
  // --json keeps stdout for the JSON object alone: the error goes to stderr.
  const Result json =
      run("run --json " + trace("ew_chain_f32"), "CUDA_VISIBLE_DEVICES=", "2>/dev/null");
  CHECK(json.status == 1);
  CHECK(json.out.empty());
}

TEST_CASE("run --json: one JSON object with the check and each step's figures", "[tools][gpu]") {
  // Skips (saying so) without a GPU: `run` fails then, as the test above checks.
  const Result probe = run("run --iters 1 " + trace("softmax_f32"), "", "2>&1 >/dev/null");
  if (probe.out.find("no GPU") != std::string::npos) {
    FUSEJIT_SKIP("no GPU");
  }
  for (const char* name : {"softmax_f32", "mlp_bf16"}) {
    INFO(name);
    const Result r =
        run(std::string("run --json --check --iters 3 ") + trace(name), "", "2>/dev/null");
    INFO(r.out);
    REQUIRE(r.status == 0);
    const nlohmann::json doc = nlohmann::json::parse(r.out);
    CHECK(doc.at("trace") == trace(name));
    CHECK(doc.at("result") == "pass");
    CHECK(doc.at("check").at("passed") == true);
    REQUIRE_FALSE(doc.at("check").at("outputs").empty());
    for (const nlohmann::json& o : doc.at("check").at("outputs")) {
      CHECK(o.at("rel_err").get<double>() <= doc.at("check").at("bound").get<double>());
      CHECK(o.at("pass") == true);
    }
    REQUIRE(doc.at("steps").size() ==
            doc.at("kernels").get<size_t>() + doc.at("library_calls").get<size_t>());
    for (const nlohmann::json& step : doc.at("steps")) {
      CHECK(step.at("time_ms").get<double>() > 0);
      CHECK((step.contains("gbps") || step.contains("tflops") || step.at("kind") == "attention"));
    }
    CHECK(doc.at("total").at("time_ms").get<double>() > 0);
    CHECK(doc.at("total").at("gbps").get<double>() > 0);
    CHECK(doc.at("total").at("input_sets").get<int>() >= 1);
  }
  // 2.6 MB a run, far less than any L2: the runs take copies of the input in turn, one a run
  // (3 warm-up runs and 3 timed), and the check, run before them on the input itself, passes.
  const std::string small =
      std::string(FUSEJIT_SOURCE_DIR) + "/test/traces/odd/softmax_13x50257_bf16.trace";
  const Result r = run("run --json --check --iters 3 " + small, "", "2>/dev/null");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  CHECK(doc.at("result") == "pass");
  CHECK(doc.at("total").at("input_sets") == 6);
}

TEST_CASE("a bad command line exits 2 and names the option, the value and what is accepted",
          "[tools][errors]") {
  const std::string t = trace("ew_chain_f32");
  struct Case {
    std::string args;
    std::vector<std::string> says;  // each a substring of the message
  };
  const std::vector<Case> cases = {
      // Numbers: not a number, out of range, too large for any integer, missing.
      {"run --iters abc " + t, {"fusejit run: error: --iters", "'abc'", "from 1 to 1000000"}},
      {"run --iters 0 " + t, {"--iters: 0 is out of range", "from 1 to 1000000"}},
      {"run --iters -5 " + t, {"--iters: -5 is out of range"}},
      {"run --check-rows 1 " + t, {"--check-rows: 1 is out of range", "from 2 to"}},
      {"run " + t + " --iters", {"--iters needs a value", "N in 1..1000000"}},
      {"warm --jobs 99999999999 " + t, {"fusejit warm: error: --jobs: 99999999999", "1 to 1024"}},
      {"warm -j 0 " + t, {"--jobs: 0 is out of range", "1 to 1024"}},
      {"warm " + t + " -j", {"--jobs needs a value", "N in 1..1024"}},
      {"warm --jobs 2x " + t, {"--jobs: '2x' is not a whole number"}},
      {"run --iters 5 --iters 6 " + t, {"--iters given more than once"}},
      // Unknown options and commands, missing and extra arguments.
      {"plan --frobnicate " + t, {"fusejit plan: error: unknown option --frobnicate"}},
      {"warm --frobnicate " + t, {"fusejit warm: error: unknown option --frobnicate"}},
      {"--frobnicate", {"fusejit: error: unknown option --frobnicate"}},
      {"frobnicate", {"fusejit: error: unknown command 'frobnicate'", "plan, run, warm, cache"}},
      {"plan", {"fusejit plan: error: TRACE is required"}},
      {"plan " + t + " " + t, {"unexpected argument"}},
      {"warm --arch sm_90", {"fusejit warm: error: PATH is required"}},
      {"cache", {"fusejit cache: error: ACTION is required"}},
      {"cache frobnicate", {"unknown action 'frobnicate'", "stats, verify, prune or clear"}},
      // Values checked once the trace or the compiler is known.
      {"plan --dim B=4 " + t, {"fusejit plan: error: --dim B=4", "(it has none)"}},
      {"warm --arch sm_1 " + t, {"fusejit warm: error: --arch sm_1", "unknown GPU arch 'sm_1'"}},
      {"warm --arch sm_10 " + t, {"fusejit warm: error: --arch sm_10", "cannot target sm_10"}},
  };
  for (const Case& c : cases) {
    const Result r = run(c.args);
    INFO("fusejit " << c.args << "\n" << r.out);
    CHECK(r.status == 2);
    for (const std::string& s : c.says) CHECK(r.out.find(s) != std::string::npos);
    CHECK(r.out.find("--help") != std::string::npos);  // where to look next
    CHECK(r.out.find("stoi") == std::string::npos);
  }
}

TEST_CASE("every command takes --help and -h, and lists its options", "[tools][help]") {
  struct Case {
    std::string command;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {"", {"plan", "run", "warm", "cache", "version", "--version", "Exit status"}},
      {"plan", {"--json", "--dim", "TRACE"}},
      {"run",
       {"--check", "--check-rows", "--iters", "1..1000000", "--dim", "--static", "--json",
        "TRACE"}},
      {"warm", {"--arch", "--cache-dir", "-j,--jobs", "1..1024", "--ptx", "PATH"}},
      {"cache", {"stats|verify|prune|clear", "--cache-dir"}},
      {"version", {"Usage: fusejit version"}},
  };
  for (const Case& c : cases) {
    for (const char* flag : {"--help", "-h"}) {
      const Result r = run(c.command + " " + flag, "", "2>/dev/null");  // help goes to stdout
      INFO("fusejit " << c.command << " " << flag << "\n" << r.out);
      CHECK(r.status == 0);
      CHECK(r.out.find("Usage: fusejit" + (c.command.empty() ? "" : " " + c.command)) !=
            std::string::npos);
      for (const std::string& m : c.mentions) CHECK(r.out.find(m) != std::string::npos);
      // Self-contained: an installed binary has no README next to it.
      CHECK(r.out.find("README") == std::string::npos);
    }
  }
  // `fusejit help [COMMAND]` is `fusejit [COMMAND] --help`; `fusejit` alone shows the help on
  // stderr, as a usage error.
  CHECK(run("help", "", "2>/dev/null").out == run("--help", "", "2>/dev/null").out);
  CHECK(run("help warm", "", "2>/dev/null").out == run("warm --help", "", "2>/dev/null").out);
  CHECK(run("help frobnicate").status == 2);
  const Result bare = run("", "", "2>&1 >/dev/null");
  CHECK(bare.status == 2);
  CHECK(bare.out.find("Usage: fusejit") != std::string::npos);
}

TEST_CASE("version: --version and the version command print it", "[tools][help]") {
  const Result flag = run("--version", "", "2>/dev/null");
  CHECK(flag.status == 0);
  CHECK(std::regex_match(flag.out, std::regex("fusejit [0-9]+\\.[0-9]+\\.[0-9]+\n")));
  const Result command = run("version", "", "2>/dev/null");
  CHECK(command.status == 0);
  CHECK(command.out == flag.out);
}

TEST_CASE("warm: progress on stderr as plain lines, results on stdout", "[tools][warm]") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("fusejit_cli_test_warm_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  const std::string warm = "warm -j 2 --arch sm_90 --cache-dir ";
  const std::string traces = std::string(FUSEJIT_SOURCE_DIR) + "/examples/traces";

  // stdout alone: the per-trace lines and the contract's last line, no progress.
  const Result out = run(warm + (dir / "a").string() + " " + traces, "", "2>/dev/null");
  CHECK(out.status == 0);
  CHECK(out.out.find("fusejit warm:") == std::string::npos);
  std::smatch m;
  REQUIRE(std::regex_search(out.out, m, std::regex("\ncompiled: (\\d+)  cached: 0  failed: 0\n$")));
  const int kernels = std::stoi(m[1]);
  CHECK(kernels > 2);

  // stderr alone (not a terminal): plain lines, counts that only grow, the last one complete.
  const Result err = run(warm + (dir / "b").string() + " " + traces, "", "2>&1 >/dev/null");
  CHECK(err.status == 0);
  CHECK(err.out.find('\r') == std::string::npos);
  CHECK(err.out.find("compiled:") == std::string::npos);
  const std::regex line("fusejit warm: (\\d+)/(\\d+) traces, (\\d+)/(\\d+) kernels \\((\\d+)%\\), [0-9.]+ s\n");
  int lines = 0, last_traces = -1, last_kernels = -1;
  for (auto it = std::sregex_iterator(err.out.begin(), err.out.end(), line);
       it != std::sregex_iterator(); ++it, ++lines) {
    const std::smatch& l = *it;
    CHECK(std::stoi(l[2]) == 23);  // examples/traces holds 23 traces
    CHECK(std::stoi(l[4]) == kernels);
    CHECK(std::stoi(l[1]) >= last_traces);
    CHECK(std::stoi(l[3]) >= last_kernels);
    last_traces = std::stoi(l[1]);
    last_kernels = std::stoi(l[3]);
  }
  CHECK(count(err.out, "\n") == lines);  // nothing else on stderr
  CHECK(lines >= 2);  // a line per tenth of the kernels at least, then the last
  CHECK(last_traces == 23);
  CHECK(last_kernels == kernels);
  CHECK(err.out.find("(100%)") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("warm: the skinny-GEMM kernels a run would generate are warmed too", "[tools][warm]") {
  // FUSEJIT_GEMV's default takes one row of bf16 against at least 2^24 weights: the gate/up and
  // vocabulary projections of an 8B decode step, not the odd 1000 x 4099 one (cuBLASLt,
  // nothing to compile).
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("fusejit_cli_test_gemv_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  const std::string gemv = std::string(FUSEJIT_SOURCE_DIR) + "/bench/gemv/llama8b_";
  const std::string traces = gemv + "gate_up_m1.trace " + gemv + "lm_head_m1.trace " +
                             std::string(FUSEJIT_SOURCE_DIR) + "/bench/gemv/odd_bias_relu_m1.trace";
  const auto warm = [&](const std::string& env, const std::string& cache) {
    return run("warm -j 2 --arch sm_90 --cache-dir " + (dir / cache).string() + " " + traces, env,
               "2>/dev/null");
  };
  const Result on = warm("", "auto");
  CHECK(on.status == 0);
  CHECK(on.out.find("compiled: 2  cached: 0  failed: 0") != std::string::npos);
  // A call the kernel takes is no library call any more.
  CHECK(on.out.find("lm_head_m1.trace: 1 kernel, 0 library calls;") != std::string::npos);
  CHECK(on.out.find("odd_bias_relu_m1.trace: 0 kernels, 1 library call;") != std::string::npos);
  // FUSEJIT_PDL=1: other sources, so two more kernels in the same cache.
  CHECK(warm("FUSEJIT_PDL=1", "auto").out.find("compiled: 2  cached: 0  failed: 0") !=
        std::string::npos);
  CHECK(warm("", "auto").out.find("compiled: 0  cached: 2  failed: 0") != std::string::npos);
  CHECK(warm("FUSEJIT_GEMV=0", "off").out.find("compiled: 0  cached: 0  failed: 0") !=
        std::string::npos);
  CHECK(warm("FUSEJIT_GEMV=1", "all").out.find("compiled: 3  cached: 0  failed: 0") !=
        std::string::npos);
  // int8 weights: the kernel in every mode, FUSEJIT_GEMV=0 too (one row, and the tensor-core
  // variant at 8).
  const Result int8 = run("warm -j 2 --arch sm_90 --cache-dir " + (dir / "int8").string() + " " +
                              gemv + "down_int8_m1.trace " + gemv + "down_int8_m8.trace",
                          "FUSEJIT_GEMV=0", "2>/dev/null");
  INFO(int8.out);
  CHECK(int8.status == 0);
  CHECK(int8.out.find("compiled: 2  cached: 0  failed: 0") != std::string::npos);
  CHECK(int8.out.find("down_int8_m8.trace: 1 kernel, 0 library calls;") != std::string::npos);
  // FUSEJIT_GEMV_PROLOGUE=1: the tiny decode step's norms and silu(gate) * up run inside the
  // GEMV kernels after them (2 layers x 3, and the final norm), so `plan` names 7 prologues and
  // `warm` compiles what a run loads: 7 kernels fewer.
  const std::string tiny =
      std::string(FUSEJIT_SOURCE_DIR) + "/test/traces/replay/tiny_decode_step.trace";
  for (const bool prologue : {false, true}) {
    const std::string env =
        std::string("FUSEJIT_GEMV=1 FUSEJIT_GEMV_PROLOGUE=") + (prologue ? "1" : "0");
    const Result plan = run("plan " + tiny, env, "2>/dev/null");
    size_t named = 0;
    for (size_t at = plan.out.find("(a prologue: region"); at != std::string::npos;
         at = plan.out.find("(a prologue: region", at + 1)) {
      ++named;
    }
    CHECK(named == (prologue ? 7u : 0u));
    const Result warmed =
        run("warm -j 2 --arch sm_90 --cache-dir " + (dir / "tiny").string() + " " + tiny, env,
            "2>/dev/null");
    INFO(warmed.out);
    CHECK(warmed.status == 0);
    CHECK(warmed.out.find(prologue ? ": 20 kernels, 0 library calls;"
                                   : ": 27 kernels, 0 library calls;") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("plan on a trace with dynamic dims: which regions serve every size", "[tools][dynamic]") {
  const std::string dir = std::string(FUSEJIT_SOURCE_DIR) + "/test/traces/dynamic/";
  const Result text = run("plan --dim B=5 --dim S=77 " + dir + "rmsnorm_residual_bf16.trace");
  INFO(text.out);
  REQUIRE(text.status == 0);
  CHECK(text.out.find("dynamic dims: B=5, S=77 (planned once for every size)") !=
        std::string::npos);
  CHECK(count(text.out, "one kernel for every size") == 2);
  // Reasons name the dims, not the numbers standing for them while planning.
  CHECK(text.out.find("[B*S,4096]") != std::string::npos);

  const nlohmann::json plan = plan_json(dir + "colsum_f32.trace");
  CHECK(plan.at("dynamic") == nlohmann::json::parse(
                                  R"({"dims": [{"name": "B", "value": 16384}], "regions": [false]})"));
  CHECK(plan.at("kernels") == 1);
  CHECK(plan_json("--dim B=37 " + dir + "colsum_f32.trace").at("dynamic").at("dims").at(0).at(
            "value") == 37);
}

TEST_CASE("the --dim option names a dynamic dim of the trace and a positive size", "[tools][dynamic]") {
  const std::string t = std::string(FUSEJIT_SOURCE_DIR) + "/test/traces/dynamic/ew_chain_f32.trace";
  for (const char* bad : {"--dim N=4", "--dim B=0", "--dim B", "--dim B=x"}) {
    const Result r = run(std::string("plan ") + bad + " " + t);
    INFO(bad << ": " << r.out);
    CHECK(r.status == 2);
    CHECK(r.out.find("expected NAME=VALUE with NAME a dynamic dim of the trace (B)") !=
          std::string::npos);
  }
  const Result r = run("plan --dim B=4 " + trace("ew_chain_f32"));
  CHECK(r.status == 2);
  CHECK(r.out.find("(it has none)") != std::string::npos);
}
