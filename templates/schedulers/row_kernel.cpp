// templates/row_kernel: the assembly of a row kernel from its pieces (row_kernel.h): the
// values of the region at the row's elements (where region inputs come from, which values the
// register cache and the finished reductions already hold), the passes over the row, the row
// outputs, and the kernel around them. Owns the order of the pieces; each piece owns its
// statements.
#include <algorithm>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "templates/schedulers/row_kernel.h"

namespace fusejit::templates {

namespace {

class RowKernelBuilder {
 public:
  RowKernelBuilder(const RegionInfo& info, const ReduceSpace& space, const RowConfig& cfg,
                   std::set<ir::NodeId> cacheable, int64_t cache_entries)
      : f_(info, space, cfg),
        values_(
            info, [this](ir::NodeId id, const Index& at, ValueScope&) { return leaf(id, at); },
            [this](ir::NodeId id, const Index& at) { return intercept(id, at); }),
        cache_(f_, std::move(cacheable), cache_entries),
        stages_(f_),
        acc_(f_, values_, row_scope_, cache_) {}

  RowKernel build();

 private:
  std::unique_ptr<RowPass> begin_pass() {
    auto p = new_row_pass(&row_scope_);
    current_ = p.get();
    return p;
  }
  void walk(kir::Block& out, const RowPass& p) const {
    add_row_walk(out, p, f_,
                 vector_guard(f_, filling_ ? WalkUse::fill : WalkUse::pass, passes_load_));
  }
  kir::ExprP leaf(ir::NodeId id, const Index& at);
  kir::ExprP row_load(ir::NodeId id, const Index& at);
  kir::ExprP intercept(ir::NodeId id, const Index& at);
  kir::Block& add_pass(kir::Block& main, int pass);
  void add_deviations(kir::Block& main, const std::vector<ir::NodeId>& means);
  void add_finished(kir::Block& row, const std::vector<ir::NodeId>& here);
  void store_full(RowPass& p, const ReduceOutput& out);
  kir::Block row_outputs();
  kir::Block cache_fill();
  kir::Block stage_copies(const Index& at);
  kir::Block row_body(const kir::Block& cache, const kir::Block& main,
                      const kir::Block& outputs) const;

  RowFrame f_;
  kir::Block row_prelude_;
  ValueScope row_scope_{&row_prelude_, nullptr, {}};
  Values values_;
  RegisterCache cache_;
  RowStages stages_;
  RowAccumulators acc_;
  RowPass* current_ = nullptr;
  std::map<ir::NodeId, kir::ExprP> finished_;
  bool filling_ = false;      // the walk being built fills the register cache (or stages it)
  bool passes_load_ = false;  // a pass reads a region input along the row (RowPass::loads)
  int vector_accesses_ = 0;
  kir::Block cluster_slots_;  // the __shared__ slots of the cluster exchanges
};

// A region input at `at`: loaded once per row when the same for the whole row; else per
// vector, one 16-byte load when it moves by one element per lane, one scalar when it is the
// same for every lane, a load per lane otherwise.
kir::ExprP RowKernelBuilder::leaf(ir::NodeId id, const Index& at) {
  if (!uses(at, f_.k)) return row_load(id, at);
  const RegionInfo& info = f_.info;
  const DTypeCode& code = dtype_code(info.node(id).dtype);
  const std::string arith(code.arith);
  RowPass& p = *current_;
  const Lane l = lane(at);
  if (l == Lane::unit && f_.cfg.v > 1) {
    const ValueKey key = value_key(id, at, Held::vector);
    kir::ExprP array = p.chunk.find(key);
    if (!array) {
      array = p.prelude.array(std::string(code.storage), values_.fresh("r"), f_.cfg.v);
      const kir::ExprP stage = filling_ ? stages_.slots(id, at) : nullptr;
      const kir::ExprP src = stage ? kir::add(stage, kir::var(f_.vars.slot))
                                   : kir::add(kir::var(info.input_var(id)), kir::offset(at, true));
      p.prelude.eval(kir::load_vec(array, src));
      p.loads = true;
      p.chunk.memo[key] = array;
      ++vector_accesses_;
    }
    return p.body.let(arith, values_.fresh("x"),
                      apply(code.load, kir::subscript(array, kir::var(f_.vars.j))));
  }
  if (l == Lane::none) {  // the same for every lane of the vector
    const ValueKey key = value_key(id, at);
    if (kir::ExprP hit = p.chunk.find(key)) return hit;
    kir::ExprP var =
        p.prelude.let(arith, values_.fresh("h"), load(info, id, kir::offset(at, true)));
    p.loads = true;
    p.chunk.memo[key] = var;
    return var;
  }
  p.loads = true;
  return p.body.let(arith, values_.fresh("x"), load(info, id, kir::offset(at)));
}

// A leaf that is the same for the whole row: loaded once per row (0 on a row past the end).
kir::ExprP RowKernelBuilder::row_load(ir::NodeId id, const Index& at) {
  const ValueKey key = value_key(id, at);
  if (kir::ExprP hit = row_scope_.find(key)) return hit;
  const std::string arith(dtype_code(f_.info.node(id).dtype).arith);
  kir::ExprP value = load(f_.info, id, kir::offset(at));
  if (f_.guards().row) {  // live ? value : 0
    const kir::ExprP zero = static_cast_to(arith, kir::lit(0));
    value = kir::select(kir::var(f_.vars.live), value, zero);
  }
  kir::ExprP var = row_prelude_.let(arith, values_.fresh("h"), value);
  row_scope_.memo[key] = var;
  return var;
}

// A finished reduction's value (only at its row), or the register cache's element.
kir::ExprP RowKernelBuilder::intercept(ir::NodeId id, const Index& at) {
  if (f_.space.depth.count(id) != 0) {
    const auto it = finished_.find(id);
    if (it == finished_.end() || !(index_key(at) == f_.row_key)) {
      throw InternalError(fmt::format("%{} is read at index {} before or outside its row ({})", id,
                                      offset(at), offset(f_.row_digits)));
    }
    return it->second;
  }
  if (filling_) return nullptr;
  return cache_.element(id, at, values_);
}

// Pass `pass` over the row's elements, added to `main`: the reductions of that depth
// accumulated and finished (row_finish.cpp), and the full-size outputs that need exactly the
// reductions before it. Returns the block where the row goes on: `main`, or with split rows
// the last block's combination, where the row is finished.
kir::Block& RowKernelBuilder::add_pass(kir::Block& main, int pass) {
  auto p = begin_pass();
  std::vector<ir::NodeId> here;
  for (ir::NodeId r : f_.space.reduces) {
    if (f_.space.depth.at(r) == pass) here.push_back(r);
  }
  bool writes = false;
  for (const ReduceOutput& out : f_.space.outputs)
    writes = writes || (out.full && out.pass == pass);
  if (here.empty() && !writes) return main;
  for (ir::NodeId r : here) acc_.add(main, *p, r);
  for (const ReduceOutput& out : f_.space.outputs) {
    if (out.full && out.pass == pass) store_full(*p, out);
  }
  main.comment("pass {}", pass);
  walk(main, *p);
  passes_load_ = passes_load_ || p->loads;
  add_deviations(main, acc_.exact_among(here));
  kir::Block& row = add_row_finish(f_, main, pass, here, cluster_slots_);
  add_finished(row, here);
  return row;
}

// The Welford means of this pass held exactly: one more walk over the register cache.
void RowKernelBuilder::add_deviations(kir::Block& main, const std::vector<ir::NodeId>& means) {
  if (means.empty()) return;
  auto p = begin_pass();
  acc_.add_deviations(main, *p, means);
  main.comment("squared deviations from the thread's mean");
  walk(main, *p);
}

// The reductions of `here`, finished: one value per row, which later passes read.
void RowKernelBuilder::add_finished(kir::Block& row, const std::vector<ir::NodeId>& here) {
  const RegionInfo& info = f_.info;
  const auto acc = [&](ir::NodeId id) { return f_.acc(id); };
  for (ir::NodeId r : here) {
    const ir::Node& n = info.node(r);
    const kir::ExprP value =
        acc_.unshifted(r, reduced_value(info, f_.space, r, f_.space.length, acc));
    // A Welford mean that only its variance read (var) is declared only where read.
    const bool mean = std::any_of(f_.space.welford.begin(), f_.space.welford.end(),
                                  [&](const auto& pair) { return pair.second == r; });
    const std::string type(dtype_code(n.dtype).arith), name = values_.fresh(info.named("v", r));
    const std::string op(ir::op_name(n.op));
    finished_[r] = mean ? row.let_if_read(type, name, value, op) : row.let(type, name, value, op);
  }
}

void RowKernelBuilder::store_full(RowPass& p, const ReduceOutput& out) {
  const ir::Node& n = f_.info.node(out.id);
  const DTypeCode& code = dtype_code(n.dtype);
  const Index at = index_from_digits(flatten(f_.x), n.shape);
  const kir::ExprP value = values_.value(out.id, at, p.lane);
  const kir::ExprP dst = kir::var(f_.info.output_var(out.position));
  if (f_.cfg.v > 1 && lane(at) == Lane::unit) {
    vector_store(p.prelude, p.body, p.stores, n.dtype, fmt::format("s{}", out.position),
                 kir::add(dst, kir::offset(at, true)), f_.cfg.v, value, kir::var(f_.vars.j));
    ++vector_accesses_;
  } else {
    kir::Block& body = f_.guards().predicated ? p.body.branch(kir::var(f_.vars.in)) : p.body;
    body.assign(kir::subscript(dst, kir::offset(at)), apply(code.store, value));
  }
}

// The outputs with one value per row (the reductions and their epilogue).
kir::Block RowKernelBuilder::row_outputs() {
  kir::Block out;
  ValueScope scope{&out, &row_scope_, {}};
  for (const ReduceOutput& o : f_.space.outputs) {
    if (o.full) continue;
    const ir::Node& n = f_.info.node(o.id);
    const Index at = index_from_digits(f_.row_digits, n.shape);
    const kir::ExprP value = values_.value(o.id, at, scope);
    out.assign(kir::subscript(kir::var(f_.info.output_var(o.position)), kir::offset(at)),
               apply(dtype_code(n.dtype).store, value));
  }
  return out;
}

// The register cache, filled before pass 1 with what the passes asked for; with staged rows,
// around the stages' copies (RowStages::around_fill).
kir::Block RowKernelBuilder::cache_fill() {
  kir::Block cache;
  if (cache_.empty()) return cache;
  auto p = begin_pass();
  filling_ = true;
  cache.comment("register cache: the row's values that several passes read");
  for (const RegisterCache::Entry& e : cache_.entries()) {
    const kir::ExprP array = cache.array(e.array, {f_.cfg.chunks * f_.cfg.v});
    p->body.assign(kir::subscript(array, f_.slot), values_.value(e.id, e.at, p->lane));
  }
  walk(cache, *p);
  filling_ = false;
  if (stages_.empty()) return cache;
  kir::Block this_row = stage_copies(f_.x);
  return stages_.around_fill(std::move(cache), std::move(this_row), stage_copies(f_.x_next));
}

// The copies that stage the row at `at` (this row, or the next one the block takes): per staged
// input, each vector of the cache fill into its slot, under the fill's own walk and guards.
kir::Block RowKernelBuilder::stage_copies(const Index& at) {
  auto p = new_row_pass(&row_scope_);
  stages_.add_copies(p->prelude, at);
  kir::Block out;
  filling_ = true;
  walk(out, *p);
  filling_ = false;
  return out;
}

// The row's statements inside the row loop: the row guard, the row prelude, the cache, the
// passes and the row outputs (written by the group's first thread, unless split rows wrote
// them in the last block's combination).
kir::Block RowKernelBuilder::row_body(const kir::Block& cache, const kir::Block& main,
                                      const kir::Block& outputs) const {
  kir::Block body;
  if (f_.guards().row) body.let(f_.vars.live, kir::lt(kir::var(f_.vars.row), f_.rows_bound()));
  body.splice(row_prelude_);
  body.splice(cache);
  body.splice(main);
  if (f_.pieces.spread != RowSpread::split && !outputs.empty()) {
    kir::ExprP cond;
    if (f_.guards().row) cond = kir::var(f_.vars.live);
    if (f_.pieces.spread == RowSpread::cluster) {
      cond = conjoin(cond, kir::infix(kir::var(f_.vars.s), "==", kir::lit(0)));
    }
    if (f_.cfg.group > 1) cond = conjoin(cond, kir::infix(kir::var(f_.vars.g), "==", kir::lit(0)));
    (cond ? body.branch(cond) : body).splice(outputs);
  }
  return body;
}

RowKernel RowKernelBuilder::build() {
  kir::Block main;  // the row loop's body after the prelude and the cache
  kir::Block* row_end = &main;
  for (int pass = 1; pass <= f_.space.passes + 1; ++pass) row_end = &add_pass(*row_end, pass);
  const kir::Block outputs = row_outputs();
  // Split rows: written inside the last block's combination, where the passes left the row.
  if (f_.pieces.spread == RowSpread::split) row_end->splice(outputs);
  const kir::Block cache = cache_fill();

  KernelBody kb = row_kernel_body(f_, stages_);
  add_row_header(kb.fn, f_, kb.kind, !cache_.empty(), acc_, stages_);
  const kir::Block body = row_body(cache, main, outputs);
  stages_.declare(kb.fn.body);
  add_row_loop(kb.fn.body, f_, body, cluster_slots_);
  return RowKernel{std::move(kb), vector_accesses_, !cache_.empty()};
}

}  // namespace

RowKernel build_row_kernel(const RegionInfo& info, const ReduceSpace& space, const RowConfig& cfg,
                           std::set<ir::NodeId> cacheable, int64_t cache_entries) {
  return RowKernelBuilder(info, space, cfg, std::move(cacheable), cache_entries).build();
}

}  // namespace fusejit::templates
