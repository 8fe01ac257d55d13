// Every FUSEJIT_* variable: valid values parse, invalid ones throw an error that names the
// variable and lists the valid values; unknown names are warnings.
#include "fusejit/options.h"
#include "fusejit/error.h"
#include "jit/runtime/runtime.h"
#include "support/catch.h"
#include "templates/target.h"

using fusejit::CacheMode;
using fusejit::LogLevel;
using fusejit::Options;

namespace {
Options parse1(const std::string& name, const std::string& value) {
  return Options::parse({{name, value}});
}
}  // namespace

TEST_CASE("defaults", "[jit][options]") {
  const Options o = Options::parse({});
  CHECK(o.log_level == LogLevel::warn);
  CHECK(o.cache == CacheMode::on);
  CHECK(o.dump_dir == "./fusejit_dump");
  CHECK_FALSE(o.dump.any());
  CHECK_FALSE(o.require_warm);
  CHECK_FALSE(o.cache_max_mb.has_value());
  CHECK(o.memo_max == 1024);
  CHECK(o.kernels_max == 4096);
  CHECK(o.arch.empty());
  CHECK(o.cudnn_path.empty());
  CHECK_FALSE(o.cache_dir.empty());
}

TEST_CASE("valid values", "[jit][options]") {
  CHECK(parse1("FUSEJIT_LOG", "debug").log_level == LogLevel::debug);
  CHECK(parse1("FUSEJIT_LOG", "off").log_level == LogLevel::off);
  const Options d = parse1("FUSEJIT_DUMP", "cuda, ptx");
  CHECK(d.dump.cuda);
  CHECK(d.dump.ptx);
  CHECK_FALSE(d.dump.ir);
  const Options all = parse1("FUSEJIT_DUMP", "all");
  CHECK((all.dump.ir && all.dump.plan && all.dump.decisions && all.dump.cuda && all.dump.ptx &&
         all.dump.kir));
  CHECK(parse1("FUSEJIT_DUMP", "kir").dump.kir);
  CHECK(parse1("FUSEJIT_DUMP_DIR", "/tmp/d").dump_dir == "/tmp/d");
  CHECK(parse1("FUSEJIT_CACHE_DIR", "/tmp/c").cache_dir == "/tmp/c");
  CHECK(parse1("FUSEJIT_CACHE", "memory").cache == CacheMode::memory);
  CHECK(parse1("FUSEJIT_CACHE", "off").cache == CacheMode::off);
  CHECK(parse1("FUSEJIT_CACHE_MAX_MB", "512").cache_max_mb == 512);
  CHECK(parse1("FUSEJIT_MEMO_MAX", "1").memo_max == 1);
  CHECK(parse1("FUSEJIT_MEMO_MAX", "100000").memo_max == 100000);
  CHECK(parse1("FUSEJIT_KERNELS_MAX", "64").kernels_max == 64);
  CHECK(parse1("FUSEJIT_RECORD_DIR", "/tmp/r").record_dir == "/tmp/r");
  CHECK(parse1("FUSEJIT_REQUIRE_WARM", "1").require_warm);
  CHECK_FALSE(parse1("FUSEJIT_REQUIRE_WARM", "0").require_warm);
  const Options dis = parse1("FUSEJIT_DISABLE", "fusion,vectorize");
  CHECK(dis.disable.fusion);
  CHECK(dis.disable.vectorize);
  CHECK_FALSE(dis.disable.epilogue);
  CHECK_FALSE(dis.disable.graphs);
  CHECK(parse1("FUSEJIT_DISABLE", "graphs,memo").disable.graphs);
  CHECK_FALSE(dis.disable.sweeps);
  CHECK(parse1("FUSEJIT_DISABLE", "sweeps").disable.sweeps);
  CHECK(fusejit::jit::plan_options(parse1("FUSEJIT_DISABLE", "sweeps")).sweeps == false);
  CHECK(fusejit::jit::plan_options(Options{}).sweeps);
  CHECK(parse1("FUSEJIT_GEMV_PROLOGUE", "1").gemv_prologue);
  CHECK_FALSE(fusejit::Options{}.gemv_ring);  // off until timed
  CHECK(parse1("FUSEJIT_GEMV_RING", "1").gemv_ring);
  CHECK(fusejit::jit::build_options(parse1("FUSEJIT_GEMV_RING", "1"), {}).codegen.gemv_ring);
  CHECK_FALSE(fusejit::jit::build_options(Options{}, {}).codegen.gemv_ring);
  CHECK(
      fusejit::jit::build_options(parse1("FUSEJIT_GEMV_PROLOGUE", "1"), {}).codegen.gemv_prologue);
  CHECK_FALSE(fusejit::jit::build_options(Options{}, {}).codegen.gemv_prologue);
  CHECK_FALSE(fusejit::Options{}.gemv_epilogue);  // off until timed
  CHECK(
      fusejit::jit::build_options(parse1("FUSEJIT_GEMV_EPILOGUE", "1"), {}).codegen.gemv_epilogue);
  CHECK_FALSE(fusejit::jit::build_options(Options{}, {}).codegen.gemv_epilogue);
  CHECK(parse1("FUSEJIT_ARCH", "sm_90").arch == "sm_90");
  CHECK(parse1("FUSEJIT_ARCH", "sm_90a").arch == "sm_90a");
  CHECK(parse1("FUSEJIT_TF32", "1").allow_tf32);
  CHECK(parse1("FUSEJIT_PDL", "1").pdl == fusejit::PdlMode::all);
  CHECK(parse1("FUSEJIT_PDL", "all").pdl == fusejit::PdlMode::all);
  CHECK(parse1("FUSEJIT_PDL", "gemv").pdl == fusejit::PdlMode::gemv);
  CHECK(parse1("FUSEJIT_PDL", "0").pdl == fusejit::PdlMode::off);
  CHECK(fusejit::Options{}.pdl == fusejit::PdlMode::off);  // off until timed on a GPU
  CHECK(parse1("FUSEJIT_ATTENTION", "1").attention == fusejit::AttentionMode::cudnn);
  CHECK(parse1("FUSEJIT_ATTENTION", "auto").attention == fusejit::AttentionMode::cudnn);
  CHECK(parse1("FUSEJIT_ATTENTION", "kernel").attention == fusejit::AttentionMode::kernel);
  CHECK(parse1("FUSEJIT_ATTENTION", "cudnn").attention == fusejit::AttentionMode::cudnn);
  CHECK(parse1("FUSEJIT_ATTENTION", "off").attention == fusejit::AttentionMode::off);
  CHECK(parse1("FUSEJIT_ATTENTION", "0").attention == fusejit::AttentionMode::off);
  CHECK(Options{}.attention == fusejit::AttentionMode::cudnn);
  CHECK(parse1("FUSEJIT_CUDNN_PATH", "/opt/x/libcudnn.so.9").cudnn_path == "/opt/x/libcudnn.so.9");
  CHECK(parse1("FUSEJIT_NVRTC_OPTIONS", "  --Ofast-compile=mid\t-lineinfo ").nvrtc_options ==
        std::vector<std::string>{"--Ofast-compile=mid", "-lineinfo"});
  CHECK(parse1("FUSEJIT_NVRTC_OPTIONS", "").nvrtc_options.empty());
  // The Python backend's variable: known (no warning), its value checked.
  CHECK(parse1("FUSEJIT_DYNAMO_REPLAY", "0").warnings.empty());
  CHECK(parse1("FUSEJIT_DYNAMO_REPLAY", "on").warnings.empty());
  CHECK_THROWS_WITH(parse1("FUSEJIT_DYNAMO_REPLAY", "sometimes"),
                    ContainsSubstring("FUSEJIT_DYNAMO_REPLAY"));
}

TEST_CASE("FUSEJIT_NVRTC_OPTIONS refuses what fusejit sets or what changes results",
          "[jit][options]") {
  for (const char* own : {"--use_fast_math", "-arch=sm_80", "--gpu-architecture=sm_80",
                          "--ftz=true", "-std=c++20", "--fmad=false", "-I/usr/include"}) {
    INFO(own);
    REQUIRE_THROWS_WITH(parse1("FUSEJIT_NVRTC_OPTIONS", std::string("-lineinfo ") + own),
                        ContainsSubstring(std::string("FUSEJIT_NVRTC_OPTIONS: ") + own));
  }
}

TEST_CASE("invalid values name the variable and list the valid ones", "[jit][options]") {
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_LOG", "loud"),
                      ContainsSubstring("FUSEJIT_LOG=loud: invalid value 'loud'; valid values: "
                                        "off, error, warn, info, debug, trace"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_DUMP", "ir,asm"),
                      ContainsSubstring("FUSEJIT_DUMP=asm: invalid value 'asm'; valid values: ir, "
                                        "plan, decisions, cuda, ptx, kir, all"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_CACHE", "disk"),
                      ContainsSubstring("valid values: on, memory, off"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_CACHE_MAX_MB", "10GB"),
                      ContainsSubstring("FUSEJIT_CACHE_MAX_MB=10GB"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_CACHE_MAX_MB", "0"),
                      ContainsSubstring("a whole number of megabytes, at least 1"));
  // A memo of no traces is spelled FUSEJIT_DISABLE=memo; the error says so.
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_MEMO_MAX", "0"),
                      ContainsSubstring("FUSEJIT_MEMO_MAX=0: invalid value '0'; valid values: a "
                                        "whole number of traces, at least 1"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_MEMO_MAX", "0"), ContainsSubstring("FUSEJIT_DISABLE=memo"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_MEMO_MAX", "-3"), ContainsSubstring("FUSEJIT_MEMO_MAX=-3"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_MEMO_MAX", "1k"), ContainsSubstring("FUSEJIT_MEMO_MAX=1k"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_KERNELS_MAX", "0"),
                      ContainsSubstring("FUSEJIT_KERNELS_MAX=0: invalid value '0'; valid values: "
                                        "a whole number of kernels, at least 1"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_KERNELS_MAX", ""), ContainsSubstring("FUSEJIT_KERNELS_MAX="));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_REQUIRE_WARM", "yes"),
                      ContainsSubstring("FUSEJIT_REQUIRE_WARM=yes"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_DISABLE", "fusoin"),
                      ContainsSubstring("valid values: fusion, epilogue, vectorize"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_ARCH", "hopper"), ContainsSubstring("sm_NN"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_TF32", "maybe"), ContainsSubstring("FUSEJIT_TF32=maybe"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_PDL", "yes please"),
                      ContainsSubstring("FUSEJIT_PDL=yes please") && ContainsSubstring("gemv"));
  REQUIRE_THROWS_WITH(parse1("FUSEJIT_ATTENTION", "flash"),
                      ContainsSubstring("FUSEJIT_ATTENTION=flash") && ContainsSubstring("cudnn"));
}

TEST_CASE("an unknown FUSEJIT_* variable is a warning, not an error", "[jit][options]") {
  // A variable from a newer fusejit (or a typo) must not stop an older build.
  Options o;
  REQUIRE_NOTHROW(o = parse1("FUSEJIT_DUMPDIR", "x"));
  REQUIRE(o.warnings.size() == 1);
  CHECK_THAT(o.warnings[0], ContainsSubstring("FUSEJIT_DUMPDIR is not a fusejit variable"));
  CHECK_THAT(o.warnings[0], ContainsSubstring("FUSEJIT_DUMP_DIR"));  // the known ones listed
  CHECK(parse1("FUSEJIT_LOG", "info").warnings.empty());
}

TEST_CASE("FUSEJIT_PDL reaches codegen only where the arch has programmatic launch",
          "[jit][options][pdl]") {
  const auto codegen = [](const fusejit::Options& o, const char* arch) {
    return fusejit::jit::build_options(o, fusejit::templates::target_for_arch(arch)).codegen;
  };
  fusejit::Options o = parse1("FUSEJIT_PDL", "1");
  CHECK(codegen(o, "sm_90").grid_dependency);
  CHECK_FALSE(codegen(o, "sm_90").gemv_grid_dependency);
  CHECK_FALSE(codegen(o, "sm_80").grid_dependency);
  o.pdl = fusejit::PdlMode::gemv;
  CHECK_FALSE(codegen(o, "sm_90").grid_dependency);
  CHECK(codegen(o, "sm_90").gemv_grid_dependency);
  CHECK_FALSE(codegen(o, "sm_80").gemv_grid_dependency);
  o.pdl = fusejit::PdlMode::off;
  CHECK_FALSE(codegen(o, "sm_90").grid_dependency);
  CHECK_FALSE(codegen(o, "sm_90").gemv_grid_dependency);
}
