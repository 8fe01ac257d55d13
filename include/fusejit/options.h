// Options: every FUSEJIT_* environment variable, read and validated once into a value that is
// passed down. A Context owns its Options; two Contexts in one process may differ.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fusejit/export.h"

FUSEJIT_PUBLIC_BEGIN
namespace fusejit {

enum class LogLevel { off, error, warn, info, debug, trace };
enum class CacheMode { on, memory, off };
// Where a fused kernel rounds f16/bf16 values (FUSEJIT_ROUNDING; docs/numerics.md):
//   store  intermediates stay f32 inside a kernel and are rounded only where a value is
//          stored, or where the trace casts explicitly (as torch.compile does); the default.
//   node   every f16/bf16 node is rounded to its dtype, as eager PyTorch and the CPU reference
//          do; no approximate math.
enum class Rounding { store, node };

// Which GEMMs of 1..16 rows run fusejit's generated skinny-GEMM (gemv) kernel instead of
// cuBLASLt (FUSEJIT_GEMV; the kernel takes weights [N, K], one call, no batch).
enum class GemvMode {
  off,
  // One row of bf16/f16 against weights of at least 2^26 elements (128 MiB): where an H100
  // measured it faster than cuBLASLt (bench/RESULTS.md "Skinny GEMMs"). The default.
  large,
  on,  // every GEMM the kernel takes
};

// Programmatic dependent launch on sm_90 and later (FUSEJIT_PDL; docs/api.md): a kernel launched
// with it may be scheduled while the grid ahead of it in the stream runs, and waits for that grid
// (griddepcontrol.wait) before it reads what the grid may write.
enum class PdlMode {
  off,
  // Only the skinny-GEMM kernels, which stream their first weights before the wait (into the
  // ring of stages, or into L2); every other generated kernel first lets the grid after it be
  // scheduled (griddepcontrol.launch_dependents), and is launched as before.
  gemv,
  all,  // every generated kernel
};

// How attention written from primitives runs (FUSEJIT_ATTENTION; docs/fused-attention.md).
enum class AttentionMode {
  off,     // GEMM, normalization, GEMM, as planned without fusing attention
  kernel,  // one generated flash-attention kernel, never cuDNN
  // cuDNN's fused attention where cuDNN loads, takes the problem and plans; else the generated
  // kernel. The default: on an H200 it runs the benchmark shapes 2.0-2.7x faster than the
  // kernel (bench/RESULTS.md "Fused attention").
  cudnn,
};

struct Options {
  // FUSEJIT_DUMP: what to dump. `all` sets every flag.
  struct Dump {
    bool ir = false;
    bool plan = false;
    bool decisions = false;
    bool cuda = false;
    bool ptx = false;
    bool kir = false;  // each kernel's kernel IR after each lowering step (<kernel>.kir)
    bool any() const { return ir || plan || decisions || cuda || ptx || kir; }
  } dump;
  std::string dump_dir = "./fusejit_dump";            // FUSEJIT_DUMP_DIR
  LogLevel log_level = LogLevel::warn;                // FUSEJIT_LOG
  std::string cache_dir;                              // FUSEJIT_CACHE_DIR (default: XDG/home)
  CacheMode cache = CacheMode::on;                    // FUSEJIT_CACHE
  std::optional<int64_t> cache_max_mb;                // FUSEJIT_CACHE_MAX_MB
  // In-memory bounds, each table forgetting its least recently used entries beyond its cap:
  //   memo_max     FUSEJIT_MEMO_MAX: traces kept ready (planned, kernels loaded) in a
  //                Context's trace memo; a forgotten trace is planned again when it comes back,
  //                its kernels found in the kernel cache.
  //   kernels_max  FUSEJIT_KERNELS_MAX: kernels kept loaded by a Context (its modules), and
  //                compiled kernels kept in the memory level of its kernel cache. A kernel that
  //                a kept trace still uses stays loaded until that trace goes too.
  int64_t memo_max = 1024;
  int64_t kernels_max = 4096;
  std::string record_dir;                             // FUSEJIT_RECORD_DIR ("" = off)
  bool require_warm = false;                          // FUSEJIT_REQUIRE_WARM
  // FUSEJIT_DISABLE: features turned off for bisecting.
  struct Disable {
    bool fusion = false;     // every op its own kernel
    bool epilogue = false;   // no cuBLASLt epilogue folding
    bool vectorize = false;  // no 16-byte accesses
    bool passes = false;     // no DCE/CSE/folding/simplification
    bool memo = false;       // no trace-level memo: plan and generate on every eval
    bool dynamic = false;    // no dynamic dims: every new size is a trace of its own
    bool graphs = false;     // no CUDA graph replay: every kernel launched one by one
    bool sweeps = false;     // no kernel over outputs of different shapes (fusion/partition.h)
  } disable;
  // A cached plan of at least this many kernel launches (and nothing else: no GEMMs) replays
  // as one CUDA graph; see docs/api.md "Launch overhead". Not an env var: for benchmarks, tests.
  // 2: on an H200 a graph already pays for two launches (bench/RESULTS.md "Host overhead").
  int graph_min_launches = 2;
  std::string arch;                                   // FUSEJIT_ARCH, e.g. "sm_90" ("" = device's)
  bool allow_tf32 = false;                            // FUSEJIT_TF32=1: f32 GEMMs may use TF32
  // FUSEJIT_ATTENTION: auto (also 1, on, true, cudnn), kernel, 0 (also off, false).
  AttentionMode attention = AttentionMode::cudnn;
  Rounding rounding = Rounding::store;                // FUSEJIT_ROUNDING: store or node
  // FUSEJIT_GEMV: auto (GemvMode::large), 1 (also on, true), 0 (also off, false).
  GemvMode gemv = GemvMode::large;
  // FUSEJIT_PDL: off (also 0), gemv, all (also 1). Off by default: timed on the decode step only,
  // where with gemv_ring it pays (docs/api.md).
  PdlMode pdl = PdlMode::off;
  // FUSEJIT_GEMV_PROLOGUE=1: a skinny GEMM that the generated kernel runs computes its A from
  // the pointwise or one-row normalization region just before it, which then runs no kernel
  // (docs/gemm.md, "Prologues"). Off by default: as timed on H100s and H200s so far, it makes
  // the decode step slower.
  bool gemv_prologue = false;
  // FUSEJIT_GEMV_EPILOGUE=1: a skinny GEMM that the generated kernel runs evaluates the pointwise
  // region that alone reads its output at its store, so that the output is never written
  // (docs/gemm.md, "Epilogue regions"): silu(gate) * up after a fused gate/up projection. Off by
  // default until timed on a GPU.
  bool gemv_epilogue = false;
  // FUSEJIT_GEMV_RING=1: the skinny-GEMM kernel streams its weights through a ring of stages in
  // shared memory where the SM has room, instead of keeping two stages in registers
  // (docs/gemm.md, "The weights' ring"). Off by default: alone it is no faster; with pdl it made
  // the decode step 6% faster, timed there only.
  bool gemv_ring = false;
  // FUSEJIT_CUDNN_PATH: the libcudnn.so.9 to load, and no other ("" = search for one;
  // jit/libs/cudnn_api.h lists where).
  std::string cudnn_path;
  // FUSEJIT_NVRTC_OPTIONS: more NVRTC options, separated by spaces, passed after fusejit's own
  // and part of every kernel's cache key, e.g. "--Ofast-compile=mid" (22% faster compiles and
  // 1.8-5.8x slower kernels on an H200: docs/api.md "Compile latency"). Only options that cannot
  // change what a kernel computes are accepted (compile speed, line info, register caps,
  // warnings, ptxas reports); any other is an error that lists them.
  std::vector<std::string> nvrtc_options;

  // What parsing noticed but did not refuse: each unknown FUSEJIT_* variable (a typo, or one
  // from a newer fusejit), so that a newer environment never stops an older build. A Context
  // logs them at warn level; the fusejit CLI prints them.
  std::vector<std::string> warnings;

  // Reads every FUSEJIT_* variable from the environment. Throws fusejit::UsageError naming the
  // variable, the bad value and the valid values; an unknown FUSEJIT_* name is a warning.
  static Options from_env();
  // The same from explicit (name, value) pairs, for tests and tools.
  static Options parse(const std::vector<std::pair<std::string, std::string>>& vars);
};

}  // namespace fusejit
FUSEJIT_PUBLIC_END
