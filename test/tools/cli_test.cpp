// The fusejit CLI, run as a user runs it: `plan --json` on the seed traces (the fusion
// contract: kernels, library calls, outputs per region), and clear errors for bad input.
#include <array>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>

#include <unistd.h>

#include "support/catch.h"

namespace {

struct Result {
  int status = -1;
  std::string out;  // stdout and stderr
};

// `redirect` says which streams come back (default both, as a person sees them).
Result run(const std::string& args, const std::string& env = "",
           const std::string& redirect = "2>&1") {
  const std::string cmd = env + " " FUSEJIT_CLI " " + args + " " + redirect;
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

int json_int(const std::string& json, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\": *([0-9]+)");
  REQUIRE(std::regex_search(json, m, re));
  return std::stoi(m[1]);
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
      const Result r = run("plan --json " + trace(file));
      INFO(r.out);
      REQUIRE(r.status == 0);
      CHECK(json_int(r.out, "kernels") == 1);
      CHECK(json_int(r.out, "library_calls") == 0);
    }
  }
}

TEST_CASE("plan --json: add_layernorm writes both outputs from one kernel", "[tools][plan]") {
  const Result r = run("plan --json " + trace("add_layernorm_f32"));
  REQUIRE(r.status == 0);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex("\"outputs\": *\\[([^\\]]*)\\]")));
  CHECK(count(m[1], "%") == 2);
  CHECK(count(r.out, "\"normalization\"") == 1);
}

TEST_CASE("plan --json: GEMMs are library calls that absorb their epilogues", "[tools][plan]") {
  struct Expect {
    const char* name;
    int kernels, calls;
    const char* epilogue;  // a substring of the JSON
  };
  for (const Expect& e : {Expect{"gemm_bias_relu_bf16", 0, 1, "\"activation\":\"relu\""},
                          Expect{"gemm_bias_gelu_bf16", 0, 1, "\"activation\":\"gelu_tanh\""},
                          Expect{"gemm_layernorm_bf16", 1, 1, "\"bias\":\"%"},
                          Expect{"two_gemm_mul_bf16", 1, 2, "\"epilogue\""},
                          Expect{"mlp_bf16", 0, 2, "\"activation\":\"gelu_tanh\""}}) {
    INFO(e.name);
    const Result r = run("plan --json " + trace(e.name));
    INFO(r.out);
    REQUIRE(r.status == 0);
    CHECK(json_int(r.out, "kernels") == e.kernels);
    CHECK(json_int(r.out, "library_calls") == e.calls);
    CHECK(r.out.find(e.epilogue) != std::string::npos);
  }
  // gemm_layernorm: the kernel after the GEMM is the normalization.
  const Result r = run("plan --json " + trace("gemm_layernorm_bf16"));
  CHECK(count(r.out, "\"normalization\"") == 1);
  // mlp: both calls carry a bias.
  CHECK(count(run("plan --json " + trace("mlp_bf16")).out, "\"bias\":\"%") == 2);
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
      (std::filesystem::temp_directory_path() / "fusejit_cli_test_broadcast_gemm.trace").string();
  std::ofstream(path) << "fusejit-trace 1\n"
                         "%0 : bf16[8,1,512,64] = input\n"
                         "%1 : bf16[1,16,64,512] = input\n"
                         "%2 : bf16[8,16,512,512] = matmul %0, %1\n"
                         "output %2\n";
  Result r = run("plan --json " + path);
  REQUIRE(r.status == 0);
  CHECK(json_int(r.out, "kernels") == 0);
  CHECK(json_int(r.out, "library_calls") == 1);
  CHECK(r.out.find(R"("batch_a":[8,1],"batch_b":[1,16])") != std::string::npos);
  r = run("plan " + path);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("region 0: cublasLt 512x512x64 x16 (8 calls) bf16, batch strides A 0 B 32768 "
                   "D 262144") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("CLI errors are clear", "[tools][errors]") {
  Result r = run("plan /nonexistent/x.trace");
  CHECK(r.status == 1);
  CHECK(r.out.find("/nonexistent/x.trace") != std::string::npos);

  const std::string bad =
      (std::filesystem::temp_directory_path() / "fusejit_cli_test_bad.trace").string();
  std::ofstream(bad) << "fusejit-trace 1\n%0 : f32[4] = input\n%1 : f32[4] = mull %0, %0\noutput %1\n";
  r = run("plan " + bad);
  CHECK(r.status == 1);
  CHECK(r.out.find(bad + ":3:") != std::string::npos);
  CHECK(r.out.find("mull") != std::string::npos);

  r = run("frobnicate");
  CHECK(r.status == 2);
  CHECK(r.out.find("unknown command 'frobnicate'") != std::string::npos);

  r = run("plan " + trace("ew_chain_f32"), "FUSEJIT_LOG=loud");
  CHECK(r.status == 1);
  CHECK(r.out.find("FUSEJIT_LOG=loud") != std::string::npos);
}

TEST_CASE("run without a GPU says so instead of crashing", "[tools][errors]") {
  const Result r = run("run " + trace("ew_chain_f32"), "CUDA_VISIBLE_DEVICES=");
  CHECK(r.status == 1);
  CHECK(r.out.find("run: no GPU") != std::string::npos);
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

  const Result json = run("plan --json " + dir + "colsum_f32.trace");
  INFO(json.out);
  REQUIRE(json.status == 0);
  CHECK(json.out.find("\"dynamic\": {\"dims\": [{\"name\": \"B\", \"value\": 16384}], "
                      "\"regions\": [false]}") != std::string::npos);
  CHECK(json_int(json.out, "kernels") == 1);
}

TEST_CASE("the --dim option names a dynamic dim of the trace and a positive size", "[tools][dynamic]") {
  const std::string t = std::string(FUSEJIT_SOURCE_DIR) + "/test/traces/dynamic/ew_chain_f32.trace";
  for (const char* bad : {"--dim N=4", "--dim B=0", "--dim B", "--dim B=x"}) {
    const Result r = run(std::string("plan ") + bad + " " + t);
    INFO(bad << ": " << r.out);
    CHECK(r.status != 0);
    CHECK(r.out.find("expected NAME=VALUE with NAME a dynamic dim of the trace (B)") !=
          std::string::npos);
  }
  const Result r = run("plan --dim B=4 " + trace("ew_chain_f32"));
  CHECK(r.status != 0);
  CHECK(r.out.find("(it has none)") != std::string::npos);
}
