// Helpers of the templates tests: regions built by hand (the partitioner is tested elsewhere)
// and the NVRTC check every generated kernel goes through.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "fusejit/error.h"
#include "fusion/welford.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "jit/runtime/nvrtc.h"
#include "support/catch.h"
#include "templates/builders.h"
#include "templates/emit.h"
#include "templates/kernel.h"
#include "templates/kir/kir.h"
#include "templates/schedulers/reduction.h"
#include "templates/schedulers/registry.h"
#include "templates/schedulers/row_schedule.h"

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

// Whether `k` spills when compiled for sm_90 (jit::spills: ptxas's report, or the CUBIN's stack
// frame when the compile came from the CUDA compute cache without a report).
inline bool spills(const templates::Kernel& k) {
  const jit::CompiledKernel c = jit::compile(k, "sm_90", {.extra = {"--ptxas-options=-v"}});
  INFO("ptxas says\n" << c.log);
  return jit::spills(c);
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

// The kernel proper without its comments (every `//` to the end of its line; kernels hold no
// string literals): what a check of code must search, where a comment (the region's summary,
// which echoes constants and ops) could hold the same text.
inline std::string kernel_code(const templates::Kernel& k) {
  const std::string text = kernel_text(k);
  std::string code;
  for (size_t at = 0; at < text.size();) {
    const size_t eol = std::min(text.find('\n', at), text.size());
    const size_t comment = text.find("//", at);
    code += text.substr(at, std::min(comment, eol) - at);
    code += '\n';
    at = eol + 1;
  }
  return code;
}

// True when `what` occurs in `text` (kernel text checks read better with it).
inline bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// What a kernel was built from, for the tests to assert on rather than on the comments a kernel
// carries (free to change: issue 33): the parameters its scheduler chose
// (templates/schedulers/registry.h) and its kernel IR (templates/kir/kir.h).

// The value of `field` in the kernel's schedule line (Kernel::schedule: `name{field=value, ...}`,
// params_text), as written there: a count, true or false, or a list [a, b]. Fails the test
// where the line has no such field.
inline std::string schedule_field(const templates::Kernel& k, std::string_view field) {
  INFO("schedule " << k.schedule);
  const std::string key = std::string(field) + "=";
  size_t at = std::string::npos;
  for (size_t p = k.schedule.find(key); p != std::string::npos; p = k.schedule.find(key, p + 1)) {
    if (p > 0 && (k.schedule[p - 1] == '{' || k.schedule[p - 1] == ' ')) {
      at = p + key.size();
      break;
    }
  }
  if (at == std::string::npos) FAIL("no field " << field << " in the schedule");
  size_t end = at;
  for (int depth = 0; end < k.schedule.size(); ++end) {
    const char c = k.schedule[end];
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  return k.schedule.substr(at, end - at);
}

// A count of the kernel's schedule (schedule_field).
inline int64_t schedule_count(const templates::Kernel& k, std::string_view field) {
  return std::stoll(schedule_field(k, field));
}

// A switch of the kernel's schedule (schedule_field).
inline bool schedule_flag(const templates::Kernel& k, std::string_view field) {
  const std::string v = schedule_field(k, field);
  INFO(field << "=" << v);
  REQUIRE((v == "true" || v == "false"));
  return v == "true";
}

// The scheduler that made the kernel: "pointwise", "tiled_transpose", "column", "rows".
inline std::string scheduler_of(const templates::Kernel& k) {
  return k.schedule.substr(0, k.schedule.find('{'));
}

// The parameters generate() picks for the region (templates::schedule); fails the test where
// another scheduler's kind of parameters is chosen.
template <class P>
P params_of(const ir::Graph& g, const fusion::Region& region,
            const templates::CodegenOptions& options = {}) {
  const templates::Schedule s = templates::schedule(g, region, options);
  INFO("schedule " << templates::schedule_text(s));
  const P* p = std::get_if<P>(&s.params);
  REQUIRE(p != nullptr);
  return *p;
}

template <class P>
P params_of(const ir::Graph& g, fusion::RegionKind kind,
            const templates::CodegenOptions& options = {}) {
  return params_of<P>(g, whole_graph_region(g, kind), options);
}

// The passes a row kernel of the region makes over its rows' elements, as the row scheduler
// builds it (rowwise.cpp, build_rows: the reductions analyzed with the parameters' online
// choice, row_schedule.h: element_passes).
inline int row_passes(const ir::Graph& g, const fusion::Region& region,
                      const templates::CodegenOptions& options = {}) {
  const templates::RegionInfo info(g, region, options);
  const templates::Schedule s = templates::schedule(info, options);
  const auto* p = std::get_if<templates::RowParams>(&s.params);
  REQUIRE(p != nullptr);
  return templates::element_passes(templates::analyze_reduction(info, p->online));
}

inline int row_passes(const ir::Graph& g, fusion::RegionKind kind,
                      const templates::CodegenOptions& options = {}) {
  return row_passes(g, whole_graph_region(g, kind), options);
}

// The kernel IR generate() builds for the region: the chosen scheduler's tree with its
// declarations placed, before its indices are lowered (templates/generate.cpp, build_body).
inline templates::KernelBody kernel_ir(const ir::Graph& g, const fusion::Region& region,
                                       const templates::CodegenOptions& options = {}) {
  const templates::RegionInfo info(g, region, options);
  const templates::Schedule s = templates::schedule(info, options);
  templates::KernelBody body = s.scheduler->build(info, options, s.params);
  templates::kir::place_declarations(body.fn);
  return body;
}

inline templates::KernelBody kernel_ir(const ir::Graph& g, fusion::RegionKind kind,
                                       const templates::CodegenOptions& options = {}) {
  return kernel_ir(g, whole_graph_region(g, kind), options);
}

// Every statement of a block, nested blocks included, in order.
inline void visit_stmts(const templates::kir::Block& b,
                        const std::function<void(const templates::kir::Stmt&)>& f) {
  for (const templates::kir::Stmt& s : b.stmts) {
    f(s);
    if (s.body) visit_stmts(*s.body, f);
  }
}

// Every statement of a kernel: its module-scope head, then its body.
inline void visit_stmts(const templates::kir::Function& fn,
                        const std::function<void(const templates::kir::Stmt&)>& f) {
  visit_stmts(fn.head, f);
  visit_stmts(fn.body, f);
}

// Every expression node of a kernel's statements (values, targets, loop bounds, declarators),
// each tree visited before its arguments.
inline void visit_exprs(const templates::kir::Function& fn,
                        const std::function<void(const templates::kir::Expr&)>& f) {
  std::function<void(const templates::kir::ExprP&)> walk = [&](const templates::kir::ExprP& e) {
    if (!e) return;
    f(*e);
    for (const auto& a : e->args) walk(a);
  };
  visit_stmts(fn, [&](const templates::kir::Stmt& s) {
    for (const auto* e : {&s.value, &s.target, &s.init, &s.bound, &s.step}) walk(*e);
    for (const auto& d : s.declarators) {
      for (const auto& dim : d.dims) walk(dim);
      walk(d.value);
    }
  });
}

// How many typed device operations `which` the kernel performs (with these compile-time
// parameters, where given: a warp reduction's lanes apart and group, a block reduction's block).
inline size_t count_intrinsics(const templates::kir::Function& fn, templates::kir::Intrinsic which,
                               const std::vector<int64_t>& numbers = {}) {
  size_t n = 0;
  visit_exprs(fn, [&](const templates::kir::Expr& e) {
    if (e.kind == templates::kir::ExprKind::intrinsic && e.number == static_cast<int64_t>(which) &&
        (numbers.empty() || e.numbers == numbers)) {
      ++n;
    }
  });
  return n;
}

// How many calls of functions whose name (template arguments included) starts with `prefix`.
inline size_t count_calls(const templates::kir::Function& fn, std::string_view prefix) {
  size_t n = 0;
  visit_exprs(fn, [&](const templates::kir::Expr& e) {
    if (e.kind == templates::kir::ExprKind::call && e.text.starts_with(prefix)) ++n;
  });
  return n;
}

// Whether the expression reads a variable called `name` (through offsets' index roots too).
inline bool reads_named(const templates::kir::ExprP& e, std::string_view name) {
  if (!e) return false;
  if (e->kind == templates::kir::ExprKind::var && e->var && e->var->name == name) return true;
  if (e->kind == templates::kir::ExprKind::offset) {
    for (const auto& v : templates::variables(e->at, e->lane0)) {
      if (v && v->name == name) return true;
    }
  }
  for (const auto& a : e->args) {
    if (reads_named(a, name)) return true;
  }
  return false;
}

// How many variables (scalars, arrays, loop counters, declarators) the kernel declares whose
// name starts with `prefix` and whose type (with its qualifiers) contains `type` ("": any).
inline size_t count_declared(const templates::kir::Function& fn, std::string_view prefix,
                             std::string_view type = "") {
  using templates::kir::StmtKind;
  size_t n = 0;
  visit_stmts(fn, [&](const templates::kir::Stmt& s) {
    if (s.kind == StmtKind::let || s.kind == StmtKind::array || s.kind == StmtKind::loop) {
      const bool typed = s.var->type.find(type) != std::string::npos;
      if (typed && s.var->name.starts_with(prefix)) ++n;
    } else if (s.kind == StmtKind::declare) {
      const bool typed = s.type.find(type) != std::string::npos;
      for (const auto& d : s.declarators) {
        if (typed && d.name.starts_with(prefix)) ++n;
      }
    }
  });
  return n;
}

// The type (with its qualifiers) of the variable the kernel declares as `name`; "" where it
// declares none (the first of several, where nested blocks declare it again).
inline std::string declared_type(const templates::kir::Function& fn, std::string_view name) {
  using templates::kir::StmtKind;
  std::string type;
  visit_stmts(fn, [&](const templates::kir::Stmt& s) {
    if (!type.empty()) return;
    if (s.kind == StmtKind::let || s.kind == StmtKind::array || s.kind == StmtKind::loop) {
      if (s.var->name == name) type = s.var->type;
    } else if (s.kind == StmtKind::declare) {
      for (const auto& d : s.declarators) {
        if (d.name == name) type = s.type;
      }
    }
  });
  return type;
}

// The bounds of the kernel's loops over the counter `name`, in order (a pointwise kernel's
// sweeps over `t`: its vectors, then a scalar tail where the count is no multiple of the width);
// -1 for a bound that is no count (a dynamic kernel's bound read at launch).
inline std::vector<int64_t> loop_bounds(const templates::kir::Function& fn, std::string_view name) {
  using templates::kir::ExprKind;
  std::vector<int64_t> out;
  visit_stmts(fn, [&](const templates::kir::Stmt& s) {
    if (s.kind != templates::kir::StmtKind::loop || s.var->name != name) return;
    const templates::kir::ExprP& b = s.bound;
    if (b && b->kind == ExprKind::extent) {
      out.push_back(b->number);
    } else if (b && b->kind == ExprKind::lit) {
      out.push_back(std::stoll(b->text));
    } else {
      out.push_back(-1);
    }
  });
  return out;
}

// The index arithmetic's width: 64 where a loop of the kernel counts in 64 bits (every template
// loops over its work with a counter of the index type: RegionInfo::wide_index), else 32.
inline int index_bits(const templates::kir::Function& fn) {
  bool wide = false;
  visit_stmts(fn, [&](const templates::kir::Stmt& s) {
    wide = wide || (s.kind == templates::kir::StmtKind::loop && s.var->type == "long long");
  });
  return wide ? 64 : 32;
}

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> d = {DType::f32, DType::f16,     DType::bf16, DType::i32,
                                       DType::i64, DType::boolean, DType::i8};
  return d;
}

// One tensor per input of `g`, uniform in [-amplitude, amplitude], from `seed`.
inline std::vector<ir::HostTensor> random_inputs(const ir::Graph& g, uint32_t seed,
                                                 double amplitude = 2.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-amplitude, amplitude);
  std::vector<ir::HostTensor> in;
  for (ir::NodeId id : g.inputs()) {
    ir::HostTensor t(g.node(id).dtype, g.node(id).shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng));
    in.push_back(std::move(t));
  }
  return in;
}

}  // namespace fusejit::test
