// templates/registry: see registry.h. The registration list and the parameters' fields, text
// and hash.
#include "templates/schedulers/registry.h"

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/digest.h"

namespace fusejit::templates {

// The registration: each scheduler's accessor, defined in its own file, and the table that
// lists them. Asked in the table's order: the tiled transpose before the sweep that serves
// every other pointwise region, the column kernel before the row kernel that serves every
// other reduction; attention last, so that the refusals of the other kinds' regions stay theirs.
const Scheduler& tiled_transpose_scheduler();  // transpose.cpp
const Scheduler& pointwise_scheduler();        // pointwise.cpp
const Scheduler& column_scheduler();           // column.cpp
const Scheduler& row_scheduler();              // rowwise.cpp
const Scheduler& attention_scheduler();        // attention_region.cpp

const std::vector<const Scheduler*>& schedulers() {
  static const std::vector<const Scheduler*> list = {
      &tiled_transpose_scheduler(),  // pointwise regions reading through a transposition
      &pointwise_scheduler(),        // every other pointwise region
      &column_scheduler(),           // reductions over leading or middle axes, in one pass
      &row_scheduler(),              // every other reduction and normalization
      &attention_scheduler(),        // attention regions
  };
  return list;
}

ParamFields PointwiseParams::fields() const {
  return {{"vector_widths", vector_widths}, {"block", block}, {"waves", waves}};
}

ParamFields TransposeParams::fields() const {
  return {{"tile", tile},
          {"outputs_per_thread", outputs_per_thread},
          {"tiled_inputs", tiled_inputs},
          {"c", c},
          {"r", r},
          {"mid", mid},
          {"outer", outer},
          {"tiles", tiles},
          {"shared_bytes", shared_bytes},
          {"blocks_per_sm", blocks_per_sm},
          {"block", block}};
}

ParamFields RowParams::fields() const {
  const RowConfig& c = config;
  return {{"vector_width", int64_t{c.v}},
          {"threads_per_row", c.group},
          {"block", c.block},
          {"rows_per_block", c.rows_per_block},
          {"vectors_per_thread", c.chunks},
          {"piece", c.piece},
          {"split_blocks", c.split},
          {"cluster", c.cluster},
          {"register_cache", c.cached()},
          {"staged", c.staged},
          {"online", online},
          {"looped", c.looped},
          {"register_path", register_path},
          {"min_blocks", int64_t{c.min_blocks}}};
}

ParamFields ColumnParams::fields() const {
  return {{"vector_width", int64_t{v}},
          {"tx", tx},
          {"ty", ty},
          {"tiles_n", tiles_n},
          {"tiles", tiles},
          {"split", split},
          {"piece", piece}};
}

ParamFields AttentionParams::fields() const {
  return {{"block", int64_t{block}},
          {"warps", int64_t{warps}},
          {"rows", int64_t{rows}},
          {"block_n", int64_t{block_n}},
          {"key_split", key_split},
          {"stages", int64_t{stages}},
          {"head_dim", head_dim},
          {"value_dim", value_dim},
          {"k_pitch", int64_t{k_pitch}},
          {"v_pitch", int64_t{v_pitch}},
          {"k_vector", int64_t{k_vec}},
          {"v_vector", int64_t{v_vec}},
          {"q_pairs", q_pairs},
          {"k_head_group", k_head_group},
          {"v_head_group", v_head_group},
          {"mask", attention_mask_name(mask)},
          {"skip_above_diagonal", skip_above_diagonal},
          {"q_tiles", q_tiles},
          {"kv_tiles", kv_tiles},
          {"kv_splits", kv_splits},
          {"split_tiles", split_tiles},
          {"work", work},
          {"shared_bytes", int64_t{shared_bytes}},
          {"blocks_per_sm", int64_t{blocks_per_sm}}};
}

ParamFields GemvParams::fields() const {
  ParamFields f = {{"vector_width", int64_t{vector_width}},
                   {"warps", int64_t{warps}},
                   {"block", int64_t{block}},
                   {"rows", rows},
                   {"unroll", unroll},
                   {"chunk", chunk},
                   {"tiles", tiles},
                   {"split", split},
                   {"piece", piece},
                   {"work", work},
                   {"shared_bytes", shared_bytes}};
  if (mma) f.insert(f.end(), {{"mma", mma}, {"m_tiles", m_tiles}});  // (kept out of the others')
  if (prefetch) f.insert(f.end(), {{"prefetch", prefetch}});
  if (resident) f.insert(f.end(), {{"resident", resident}});
  if (ring) f.insert(f.end(), {{"ring", ring}, {"ring_blocks", ring_blocks}});
  if (groups > 1) f.insert(f.end(), {{"groups", groups}});
  return f;
}

ParamFields param_fields(const ScheduleParams& params) {
  return std::visit([](const auto& p) { return p.fields(); }, params);
}

namespace {

std::string value_text(const ParamValue& value) {
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const auto* n = std::get_if<int64_t>(&value)) return std::to_string(*n);
  if (const auto* name = std::get_if<std::string_view>(&value)) return std::string(*name);
  return fmt::format("[{}]", fmt::join(std::get<std::vector<int64_t>>(value), ", "));
}

}  // namespace

std::string params_text(std::string_view scheduler, const ScheduleParams& params) {
  std::string fields;
  for (const auto& [name, value] : param_fields(params)) {
    fields += fmt::format("{}{}={}", fields.empty() ? "" : ", ", name, value_text(value));
  }
  return fmt::format("{}{{{}}}", scheduler, fields);
}

std::string schedule_text(const Schedule& s) { return params_text(s.scheduler->name(), s.params); }

uint64_t params_hash(std::string_view scheduler, const ScheduleParams& params) {
  return ir::hash64(params_text(scheduler, params));
}

std::vector<Verdict> verdicts(const RegionInfo& info, const CodegenOptions& options) {
  std::vector<Verdict> out;
  for (const Scheduler* s : schedulers()) out.push_back({s->name(), s->refusal(info, options)});
  return out;
}

Schedule schedule(const RegionInfo& info, const CodegenOptions& options) {
  std::vector<Verdict> refused;
  for (const Scheduler* s : schedulers()) {
    std::optional<std::string> why = s->refusal(info, options);
    if (!why) return Schedule{s, s->params(info, options), std::move(refused)};
    refused.push_back({s->name(), std::move(why)});
  }
  std::string reasons;
  for (const Verdict& v : refused) reasons += fmt::format("\n  {}: {}", v.scheduler, *v.refusal);
  throw InternalError(fmt::format("no scheduler takes the {} region:{}",
                                  fusion::region_kind_name(info.region.kind), reasons));
}

const Scheduler& scheduler_for(const RegionInfo& info, const CodegenOptions& options) {
  for (const Scheduler* s : schedulers()) {
    if (!s->refusal(info, options)) return *s;
  }
  return *schedule(info, options).scheduler;  // throws, naming every refusal
}

Schedule schedule(const ir::Graph& g, const fusion::Region& region, const CodegenOptions& options) {
  const RegionInfo info(g, region, options);
  return schedule(info, options);
}

}  // namespace fusejit::templates
