// Helpers of the templates tests: regions built by hand (the partitioner is tested elsewhere)
// and the NVRTC check every generated kernel goes through.
#pragma once

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "fusejit/error.h"
#include "fusion/welford.h"
#include "ir/graph.h"
#include "jit/runtime/nvrtc.h"
#include "support/catch.h"
#include "templates/kernel.h"

namespace fusejit::test {

// A region computing every non-input node of `g`, reading its input nodes and writing its
// outputs; a normalization lists its one-pass mean/variance pairs, as the partitioner does.
inline fusion::Region whole_graph_region(const ir::Graph& g, fusion::RegionKind kind) {
  fusion::Region r;
  r.kind = kind;
  for (size_t i = 0; i < g.size(); ++i) {
    const auto id = static_cast<ir::NodeId>(i);
    if (g.node(id).op == ir::Op::input)
      r.inputs.push_back(id);
    else
      r.nodes.push_back(id);
  }
  r.outputs = g.outputs();
  r.welford = fusion::welford_pairs(g, r);
  return r;
}

// How many times `what` occurs in `text` (a kernel's source, its PTX).
inline size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The bytes ptxas reports spilling (stores) when it compiles `k` for sm_90; -1 without a report.
inline int64_t spill_stores(const templates::Kernel& k) {
  const jit::CompiledKernel c = jit::compile(k, "sm_90", {.extra = {"--ptxas-options=-v"}});
  INFO("ptxas says\n" << c.log);
  return jit::spill_stores(c.log);
}

// Compiles the region's kernel for sm_90; checks what every kernel must satisfy.
inline void compile_and_check(const templates::Kernel& k, const fusion::Region& region) {
  if (const char* show = std::getenv("FUSEJIT_TEST_SHOW_KERNELS");
      show != nullptr && *show == '1') {
    std::cout << k.source.substr(k.source.find(templates::kKernelMarker)) << "\n";
  }
  INFO("kernel " << k.name << "\n" << k.source.substr(k.source.find(templates::kKernelMarker)));
  jit::CompiledKernel c;
  REQUIRE_NOTHROW(c = jit::compile(k, "sm_90", {.ptx = true}));
  CHECK(c.name == k.name);
  INFO("NVRTC log:\n" << c.log);
  CHECK(c.log.find("warning") == std::string::npos);  // generated code compiles cleanly
  CHECK(!c.cubin.empty());
  CHECK(c.ptx.find(k.name) != std::string::npos);
  // For looking at register use and spills: ptxas -v on the dumped PTX.
  if (const char* dir = std::getenv("FUSEJIT_TEST_DUMP_DIR"); dir != nullptr && *dir != '\0') {
    std::ofstream(std::string(dir) + "/" + k.name + ".ptx") << c.ptx;
    std::ofstream(std::string(dir) + "/" + k.name + ".cu") << k.source;
  }
  REQUIRE(k.params.size() == region.inputs.size() + region.outputs.size());
  CHECK(k.block >= 32);
  CHECK(k.block <= 1024);
  CHECK(k.block % 32 == 0);
  CHECK(k.work_blocks >= 1);
}

// Generates the region's kernel and compiles it for sm_90 (compile_and_check). Returns the
// kernel.
inline templates::Kernel generate_and_compile(const ir::Graph& g, const fusion::Region& region,
                                              const templates::CodegenOptions& options = {}) {
  const templates::Kernel k = templates::generate(g, region, options);
  compile_and_check(k, region);
  return k;
}

inline templates::Kernel compile_graph(const ir::Graph& g, fusion::RegionKind kind,
                                       const templates::CodegenOptions& options = {}) {
  return generate_and_compile(g, whole_graph_region(g, kind), options);
}

// The kernel proper, without the pasted device helpers.
inline std::string kernel_text(const templates::Kernel& k) {
  return k.source.substr(k.source.find(templates::kKernelMarker));
}

// True when `what` occurs in `text` (kernel text checks read better with it).
inline bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> d = {DType::f32, DType::f16, DType::bf16,
                                       DType::i32, DType::i64, DType::boolean};
  return d;
}

}  // namespace fusejit::test
