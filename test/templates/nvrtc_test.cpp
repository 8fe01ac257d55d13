// The NVRTC wrapper: versions, archs, PTX-only compiles, and what a compile failure says.
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "templates/device_sources.h"
#include "test/templates/support.h"

using namespace fusejit;

TEST_CASE("NVRTC version and archs", "[templates][nvrtc]") {
  CHECK(jit::nvrtc_version() >= 12000);
  const std::string v = jit::nvrtc_version_string();
  CHECK(v == std::to_string(jit::nvrtc_version() / 1000) + "." +
                 std::to_string(jit::nvrtc_version() % 1000 / 10));
  const auto archs = jit::supported_archs();
  CHECK(std::find(archs.begin(), archs.end(), "sm_90") != archs.end());
}

TEST_CASE("compile flags: precise math and C++17 and the arch", "[templates][nvrtc]") {
  const auto flags = jit::compile_flags("sm_90");
  auto has = [&](const std::string& f) {
    return std::find(flags.begin(), flags.end(), f) != flags.end();
  };
  CHECK(has("--gpu-architecture=sm_90"));
  CHECK(has("-std=c++17"));
  CHECK(has("--prec-div=true"));
  CHECK(has("--prec-sqrt=true"));
  CHECK(has("--ftz=false"));
  CHECK(has("-minimal"));  // no textures, surfaces or device runtime in the builtin header
  for (const std::string& f : flags) CHECK(f.find("fast_math") == std::string::npos);
  CHECK_FALSE(has("-lineinfo"));
  const auto with_lines = jit::compile_flags("sm_90", {.line_info = true});
  CHECK(std::find(with_lines.begin(), with_lines.end(), "-lineinfo") != with_lines.end());
  REQUIRE_THROWS_WITH(jit::compile_flags("gfx90a"), ContainsSubstring("unknown GPU arch 'gfx90a'"));
}

namespace {

templates::Kernel tiny_kernel(const std::string& name, const std::string& body) {
  templates::Kernel k;
  k.name = name;
  k.source = "extern \"C\" __global__ void " + name + "(float* p) {" + body + "}\n";
  return k;
}

}  // namespace

TEST_CASE("one compile gives the CUBIN, and the PTX when asked for", "[templates][nvrtc]") {
  const auto k = tiny_kernel("fj_test_tiny", "p[threadIdx.x] *= 2.0f;");
  const jit::CompiledKernel cubin_only = jit::compile(k, "sm_90");
  CHECK(cubin_only.cubin.substr(1, 3) == "ELF");
  CHECK(cubin_only.ptx.empty());

  const jit::CompiledKernel c = jit::compile(k, "sm_90", {.ptx = true});
  CHECK(c.cubin == cubin_only.cubin);
  CHECK(c.name == "fj_test_tiny");
  CHECK(c.cubin.size() > 100);
  CHECK(c.cubin.substr(1, 3) == "ELF");
  CHECK(c.ptx.find(".entry fj_test_tiny") != std::string::npos);  // extern "C": no mangling
  CHECK(c.ptx.find(".target sm_90") != std::string::npos);
  CHECK(c.ptx.back() != '\0');

  const jit::CompiledKernel ptx_only = jit::compile(k, "compute_90");
  CHECK(ptx_only.cubin.empty());
  CHECK(ptx_only.ptx.find(".entry fj_test_tiny") != std::string::npos);
}

TEST_CASE("a compile failure names the kernel and shows the log and keeps the source",
          "[templates][nvrtc]") {
  const auto k =
      tiny_kernel("fj_test_broken_0123456789abcdef", "p[threadIdx.x] = undeclared_name +;");
  const std::filesystem::path dumped =
      std::filesystem::temp_directory_path() / "fusejit-failed-fj_test_broken_0123456789abcdef.cu";
  std::filesystem::remove(dumped);
  std::string message;
  try {
    jit::compile(k, "sm_90");
  } catch (const CompileError& e) {  // its own type: the caller can tell it from a usage error
    message = e.what();
    CHECK(e.source_path() == dumped.string());
    CHECK(e.log().find("undeclared_name") != std::string::npos);
  }
  INFO(message);
  CHECK(message.find("fj_test_broken_0123456789abcdef") != std::string::npos);
  CHECK(message.find("undeclared_name") != std::string::npos);  // from NVRTC's log
  CHECK(message.find("error") != std::string::npos);
  CHECK(message.find(dumped.string()) != std::string::npos);
  REQUIRE(std::filesystem::exists(dumped));
  std::ifstream in(dumped);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == k.source);
  std::filesystem::remove(dumped);
}

namespace {

// A kernel `declarator`(float* p) keeping 44 floats live at once in each of 256 threads.
std::string forty_four_live(const std::string& declarator) {
  return "extern \"C\" __global__ void " + declarator + R"((float* p) {
  float v[44];
  float s = 0.0f;
  #pragma unroll
  for (int i = 0; i < 44; ++i) {
    v[i] = p[threadIdx.x + 256 * i];
    s += v[i] * v[i];
  }
  #pragma unroll
  for (int i = 0; i < 44; ++i) p[threadIdx.x + 256 * i] = v[i] / s;
}
)";
}

}  // namespace

TEST_CASE("launch bounds that spill are relaxed to each residency in turn until none does",
          "[templates][nvrtc]") {
  // 44 values live at once in each thread: ptxas spills them from the 32 registers of eight
  // blocks of 256 per SM and from the 40 of six, not from the 64 of four.
  templates::Kernel k;
  k.name = "fj_test_relaxed";
  k.source = "#ifndef FJ_MIN_BLOCKS\n#define FJ_MIN_BLOCKS 8\n#endif\n" +
             forty_four_live("__launch_bounds__(256, FJ_MIN_BLOCKS) fj_test_relaxed");
  const jit::CompiledKernel own = jit::compile(k, "sm_90", {.extra = {"--ptxas-options=-v"}});
  CHECK(jit::spills(own));  // no relaxed bounds: compiled once, as asked
  CHECK_FALSE(own.relaxed);
  k.relaxed_min_blocks = {6, 4, 2};
  const jit::CompiledKernel c = jit::compile(k, "sm_90", {.extra = {"--ptxas-options=-v"}});
  INFO(c.log);
  CHECK(c.relaxed);
  CHECK(c.relaxed_to == 4);  // 6 spills too; 2 is not needed
  CHECK_FALSE(jit::spills(c));
  k.relaxed_min_blocks = {6};  // none left that fits: the last one is kept, spilling
  const jit::CompiledKernel last = jit::compile(k, "sm_90");
  CHECK(last.relaxed_to == 6);
  CHECK(last.log.find("ptxas info") == std::string::npos);  // the report was not asked for
}

namespace {

// The "N bytes stack frame" of ptxas's report in `log`; -1 without one.
int64_t reported_frame(const std::string& log) {
  const size_t at = log.find(" bytes stack frame");
  if (at == std::string::npos) return -1;
  size_t start = at;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(log[start - 1]))) --start;
  return std::stoll(log.substr(start, at - start));
}

}  // namespace

TEST_CASE("a CUBIN's stack frame tells a spill where ptxas's report is missing",
          "[templates][nvrtc]") {
  // Where a driver is installed, NVRTC serves a compile it has seen from the CUDA compute cache
  // without running ptxas, and the log has no report: spills() then reads the CUBIN.
  templates::Kernel k;
  k.name = "fj_test_frame";
  k.source = forty_four_live("fj_test_frame");
  jit::CompiledKernel tight =
      jit::compile(k, "sm_90", {.extra = {"--ptxas-options=-v", "--maxrregcount=32"}});
  jit::CompiledKernel roomy = jit::compile(k, "sm_90", {.extra = {"--ptxas-options=-v"}});
  INFO(tight.log << roomy.log);
  const int64_t frame = jit::stack_frame_bytes(tight.cubin);
  CHECK(frame > 0);
  if (reported_frame(tight.log) >= 0) CHECK(frame == reported_frame(tight.log));
  CHECK(jit::stack_frame_bytes(roomy.cubin) == 0);
  tight.log.clear();  // as a compute-cache hit hands it back
  roomy.log.clear();
  CHECK(jit::spills(tight));
  CHECK_FALSE(jit::spills(roomy));

  // Not a CUBIN, or a damaged one: -1, never a read out of bounds (the ASan build runs this).
  CHECK(jit::stack_frame_bytes("") == -1);
  CHECK(jit::stack_frame_bytes(
            "not an ELF file at all, but long enough to have a header..........") == -1);
  const std::string& cubin = tight.cubin;
  for (const size_t keep : {size_t{16}, size_t{64}, cubin.size() / 2}) {
    INFO("the CUBIN's first " << keep << " of " << cubin.size() << " bytes");
    CHECK(jit::stack_frame_bytes(std::string_view(cubin).substr(0, keep)) == -1);
  }
  // Cut anywhere: unreadable, or (when what it needs is whole) the same frame.
  for (size_t keep = 0; keep < cubin.size(); keep += 7) {
    const int64_t cut = jit::stack_frame_bytes(std::string_view(cubin).substr(0, keep));
    if (cut != -1) CHECK(cut == frame);
  }
  std::string bad = cubin;
  bad[0x3a] = 1;  // section header entries of one byte
  CHECK(jit::stack_frame_bytes(bad) == -1);
  bad = cubin;
  bad[0x28] = bad[0x29] = bad[0x2a] = bad[0x2b] = '\xff';  // the section table far past the end
  CHECK(jit::stack_frame_bytes(bad) == -1);
}

TEST_CASE("a bad option is an NVRTC error naming the call", "[templates][nvrtc]") {
  const auto k = tiny_kernel("fj_test_options", "");
  REQUIRE_THROWS_WITH(jit::compile(k, "sm_90", {.extra = {"--no-such-option"}}),
                      ContainsSubstring("nvrtcCompileProgram failed for kernel fj_test_options") &&
                          ContainsSubstring("NVRTC_ERROR_INVALID_OPTION"));
}

TEST_CASE("every device helper compiles on its own", "[templates][nvrtc]") {
  // The helpers are pasted in this order into every kernel; check them as a unit, with a
  // kernel that instantiates the templates the generated code uses.
  templates::Kernel k;
  k.name = "fj_test_helpers";
  for (const char* f : {"fj_core.cuh", "fj_math.cuh", "fj_memory.cuh", "fj_reduce.cuh"}) {
    k.source += templates::device_source(f);
  }
  k.source += R"(
extern "C" __global__ void fj_test_helpers(const unsigned short* in, float* out, long long* li) {
  unsigned short r[8];
  fj_load_vec(r, in + threadIdx.x * 8);
  float acc = 0.0f;
  for (int j = 0; j < 8; ++j) acc = fj_op_sum()(acc, fj_bf16_to_f32(r[j]) + fj_f16_to_f32(r[j]));
  acc = fj_block_reduce<256>(acc, fj_op_max());
  long long l = fj_warp_reduce<1, 32>(fj_to_i64(acc), fj_op_sum());
  float s[4] = {fj_gelu(acc), fj_gelu_tanh(acc), fj_silu(acc), fj_sigmoid(acc)};
  fj_store_vec(out + threadIdx.x * 4, s);
  li[threadIdx.x] = fj_pow(l, 3LL) + fj_pow(fj_to_i32(acc), 2) + fj_to_i32(l);
}
)";
  const jit::CompiledKernel c = jit::compile(k, "sm_90");
  CHECK(!c.cubin.empty());
  CHECK(c.log.find("warning") == std::string::npos);
}
