// templates/gemv_epilogue: see gemv_epilogue.h; refuse_epilogue (gemv.h) is here too.
#include "templates/schedulers/gemv_epilogue.h"

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "templates/kir/index.h"
#include "templates/lower.h"

namespace fusejit::templates {

namespace {

EpilogueReads refused(EpilogueReads r, std::string why) {
  r.refusal = std::move(why);
  return r;
}

bool elementwise(ir::OpKind kind) {
  using K = ir::OpKind;
  return kind == K::unary || kind == K::binary || kind == K::compare || kind == K::select ||
         kind == K::cast;
}

}  // namespace

EpilogueReads epilogue_reads(const ir::Graph& g, const fusion::Region& consumer) {
  EpilogueReads r;
  if (consumer.kind != fusion::RegionKind::pointwise)
    return refused(r, fmt::format("it is a {} region (takes pointwise)",
                                  fusion::region_kind_name(consumer.kind)));
  if (consumer.inputs.size() != 1) return refused(r, "it reads more than D");
  if (consumer.outputs.size() != 1) return refused(r, "it has more than one output");
  r.d = consumer.inputs[0];
  const ir::Node& d = g.node(r.d);
  const Shape& out = g.node(consumer.outputs[0]).shape;
  if (d.shape.empty() || out.size() != d.shape.size())
    return refused(r, "its output's rank is not D's");
  const size_t last = d.shape.size() - 1;
  bool whole = false;
  int64_t run = 0;
  for (ir::NodeId id : consumer.nodes) {
    const ir::Node& n = g.node(id);
    const ir::OpKind kind = ir::op_kind(n.op);
    if (n.op == ir::Op::constant) {
      if (ir::numel(n.shape) != 1)
        return refused(r, fmt::format("constant %{} is not a scalar", id));
      continue;
    }
    if (n.shape != out)
      return refused(r, fmt::format("%{} ({}) has not its output's shape", id, ir::type_str(n)));
    const bool reads_d = std::find(n.inputs.begin(), n.inputs.end(), r.d) != n.inputs.end();
    if (n.op == ir::Op::slice && n.inputs[0] == r.d) {
      const int64_t extent = n.shape[last];
      if (n.axes.at(0) != static_cast<int64_t>(last) || n.step != 1 ||
          (run != 0 && extent != run) || d.shape[last] % extent != 0 || n.start % extent != 0)
        return refused(r, fmt::format("slice %{} is not one of equal runs of D's last dim", id));
      run = extent;
      r.runs[id] = n.start / extent;
      continue;
    }
    if (!elementwise(kind))
      return refused(r, fmt::format("%{} is a {} (takes elementwise ops, scalar constants and "
                                    "slices of D)",
                                    id, ir::op_name(n.op)));
    whole = whole || reads_d;
  }
  if (whole && !r.runs.empty()) return refused(r, "it reads D both whole and in slices");
  if (!whole && r.runs.empty()) return refused(r, "it does not read D");
  r.groups = whole ? 1 : d.shape[last] / run;
  Shape expected = d.shape;
  expected[last] /= r.groups;
  if (out != expected) return refused(r, "its output is not D's shape over the runs");
  return r;
}

std::string refuse_epilogue(const GemvSpec& spec, const ir::Graph& g,
                            const fusion::Region& consumer, const Target& target) {
  GemvSpec plain = spec;
  plain.epilogue = nullptr;
  const GemvParams p = gemv_params(plain, target);  // the runs change neither rows nor variant
  if (p.mma) {
    // Written and emulated, it made an 8B model's int8 decode at batch 8 slower on an H100
    // (1,338.8 against 1,524.5 tokens/s, one call): the CUDA-core variant only.
    return "the tensor-core variant (2..16 rows of bf16/f16) takes none: it ran slower with one";
  }
  const EpilogueReads reads = epilogue_reads(g, consumer);
  if (!reads.refusal.empty()) return reads.refusal;
  const ir::Node& d = g.node(reads.d);
  if (d.dtype != spec.dtype || ir::numel(d.shape) != spec.m * spec.n || d.shape.back() != spec.n)
    return fmt::format("its input ({}) is not D", ir::type_str(d));
  const ir::Node& out = g.node(consumer.outputs[0]);
  if (out.dtype != DType::f32 && out.dtype != DType::bf16 && out.dtype != DType::f16)
    return fmt::format("its output is {} (takes f32, bf16, f16)", dtype_name(out.dtype));
  if (p.rows % reads.groups != 0)  // a warp's rows in one piece per run
    return fmt::format("a warp's {} rows do not hold its {} runs", p.rows, reads.groups);
  return "";
}

GemvEpilogueBuilder::GemvEpilogueBuilder(const GemvEpilogue& e)
    : info_(*e.graph, *e.region, e.codegen),
      reads_(epilogue_reads(*e.graph, *e.region)),
      out_(e.region->outputs.at(0)) {
  if (!reads_.refusal.empty()) throw InternalError("gemv epilogue: " + reads_.refusal);
}

void GemvEpilogueBuilder::store(kir::Block& b, const kir::ExprP& d, const kir::ExprP& m,
                                const kir::ExprP& j, const std::vector<kir::ExprP>& sums) {
  if (static_cast<int64_t>(sums.size()) != reads_.groups)
    throw InternalError("gemv epilogue: a sum per run");
  const ir::Node& dn = info_.node(reads_.d);
  const DTypeCode& dcode = dtype_code(dn.dtype);
  const std::string arith(dcode.arith);
  // D's values as the region's own kernel would load them: rounded to D's dtype.
  std::vector<kir::ExprP> loaded;
  for (size_t c = 0; c < sums.size(); ++c) {
    loaded.push_back(
        b.let(arith, fmt::format("ed{}", c), apply(dcode.load, apply(dcode.store, sums[c]))));
  }
  const Shape& shape = info_.node(out_).shape;
  const int64_t count = ir::numel(shape);
  const std::string idx(info_.index_type());
  const kir::VarP e = kir::variable(idx, "ej");
  const int64_t row = count / (ir::numel(dn.shape) / dn.shape.back());  // N / groups
  b.let(e, kir::cast(idx, kir::add(kir::mul(m, kir::lit(row)), j)),
        "the epilogue region's element");
  Values values(
      info_,
      [&](ir::NodeId in, const Index&, ValueScope&) -> kir::ExprP {
        if (in != reads_.d || reads_.groups != 1)
          throw InternalError(fmt::format("gemv epilogue: %{} read whole", in));
        return loaded[0];
      },
      [&](ir::NodeId id, const Index&) -> kir::ExprP {
        const auto run = reads_.runs.find(id);
        return run == reads_.runs.end() ? nullptr : loaded[static_cast<size_t>(run->second)];
      });
  ValueScope scope{&b, nullptr, {}};
  const Index at = index_from_digits({Digit{make_root(e, count), 1, count}}, shape);
  const kir::ExprP value = values.value(out_, at, scope);
  b.assign(kir::subscript(d, kir::var(e)), apply(dtype_code(output_dtype()).store, value));
}

}  // namespace fusejit::templates
