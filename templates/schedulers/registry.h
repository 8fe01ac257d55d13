// templates/registry: the schedulers of region kernels, as data. Each scheduler answers three
// questions about a region: does it take it (and if not, why), with which parameters, and the
// kernel built from those parameters. generate() asks them in order and the first that takes
// the region makes its kernel; the others' refusals say why it got that kernel (`verdicts`,
// shown by `fusejit plan --json` and FUSEJIT_DUMP=decisions).
//
// Owns the list and its order, and the parameter structs with their text, hash and fields. Does
// not own how a scheduler decides or builds: that is its own file (pointwise.cpp, transpose.cpp,
// column.cpp, rowwise.cpp with row_schedule.cpp and the row kernel's pieces, row_kernel.h).
// A new scheduler is its own file, defining its accessor (`const Scheduler& x_scheduler()`),
// and one row in registry.cpp's table; a new row schedule returns RowParams and builds with
// build_row_kernel, so only a scheduler with parameters of a new kind adds them here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "templates/builders.h"
#include "templates/schedulers/attention.h"
#include "templates/schedulers/row_schedule.h"

namespace fusejit::templates {

// One parameter's value: a count, a switch, a count per sweep, or a kind by name.
using ParamValue = std::variant<int64_t, bool, std::vector<int64_t>, std::string_view>;
using ParamFields = std::vector<std::pair<std::string_view, ParamValue>>;

// The linear sweep (pointwise.cpp): one grid-stride loop per group of outputs with the same
// element count, over vectors of `vector_widths[k]` elements (sweep k, in the order of the
// region's outputs).
struct PointwiseParams {
  int64_t block = 256;
  int64_t waves = 0;  // Kernel::waves: no cap, one block per `block` vectors
  std::vector<int64_t> vector_widths;
  ParamFields fields() const;
};

// The tiled transpose (transpose.cpp): the output's linear index cut as
// ((outer * r + r_i) * mid + m) * c + c_i; tile x tile tiles of (c, r) through shared memory.
struct TransposeParams {
  int64_t tile = 64;
  int64_t outputs_per_thread = 1;  // along c: the output phase's vector width
  int64_t tiled_inputs = 1;        // inputs read through the tiles
  int64_t c = 1, r = 1, mid = 1, outer = 1;
  int64_t tiles = 1;
  int64_t shared_bytes = 0;
  int64_t blocks_per_sm = 1;
  int64_t block = 256;
  ParamFields fields() const;
};

// Row-style reductions and normalizations (rowwise.cpp): RowConfig (row_schedule.h) and what
// the builder reads besides it.
struct RowParams {
  RowConfig config;
  // Online softmax pairs (ReduceSpace::online) accumulate a maximum and its sum of exp in one
  // pass; false where rows held in registers keep separate passes (choose_online).
  bool online = false;
  // A looped kernel's register path (RegionInfo::row_path, bounded_row_configs): `config` is
  // the path's own; 0: not a register path.
  int64_t register_path = 0;
  ParamFields fields() const;
};

// Column-style single-pass reductions (column.cpp): a block of tx * ty threads per tile of
// tx * v adjacent columns; `split` pieces of `piece` rows per tile when the tiles are few.
struct ColumnParams {
  int v = 1;
  int64_t tx = 32, ty = 1;
  int64_t tiles_n = 1, tiles = 1;
  int64_t split = 1;  // S: blocks per tile, each reducing `piece` consecutive rows
  int64_t piece = 1;  // rows per piece (the last one may be shorter): L unless split
  ParamFields fields() const;
};

// The attention kernel of an attention region (attention_region.cpp; attention.cpp decides,
// attention_kernel.cpp builds): a block of `warps` warps takes `rows` query rows of one (batch,
// head), 16 a warp; K and V go through shared memory `block_n` keys at a time.
struct AttentionParams {
  int block = 128;  // threads
  int warps = 4;
  int rows = 64;     // query rows per work item
  int block_n = 64;  // keys per tile
  // Decode (at most 16 query rows): every warp holds the item's 16 rows and takes block_n /
  // warps keys of each tile; the warps' O, m and l are combined through shared memory at the
  // end of the item. False: each warp its own 16 rows, all keys of each tile.
  bool key_split = false;
  // Under the key split: the tiles (K and V) in shared memory at once, each loading while the
  // ones before it are computed (dynamic shared memory, stages * 2 * block_n * (k_pitch +
  // v_pitch) bytes). The other kernel stages one tile, K and V apart.
  int stages = 1;
  int64_t head_dim = 64, value_dim = 64;
  int k_pitch = 0, v_pitch = 0;  // shared row pitch, elements (dim + 8: distinct banks)
  int k_vec = 1, v_vec = 1;      // elements per global load when staging (8 by cp.async, 2 or 1)
  bool q_pairs = false;          // q's feature pairs are 4-byte aligned (one load a pair)
  int64_t k_head_group = 1, v_head_group = 1;  // logical heads per buffer head (GQA)
  AttentionMaskKind mask = AttentionMaskKind::none;
  bool skip_above_diagonal = false;  // causal with fill -inf: key tiles past the diagonal add 0
  int64_t q_tiles = 0, kv_tiles = 0;
  // Split-KV (decode: few query rows, many keys): each (batch, head, query tile) item's key
  // tiles in kv_splits pieces of split_tiles, one work item each; a piece leaves its unscaled
  // O, running max and sum in module-scope scratch, and the item's last piece to arrive
  // combines them (serial_launches). 1 and kv_tiles without a split.
  int64_t kv_splits = 1, split_tiles = 0;
  int64_t items = 0, work = 0;  // batch * heads * q_tiles items; work = items * kv_splits
  int shared_bytes = 0;                         // static shared memory: the K and V tiles
  int blocks_per_sm = 1;
  ParamFields fields() const;
};

// The skinny GEMM (gemv.cpp): a block of `warps` warps takes `rows` consecutive weight rows (a
// tile: outputs along N) per warp over one piece of K; its lanes split the piece, each taking
// `unroll` vectors of `vector_width` elements per row and stage; x's M rows of the stage sit in
// shared memory as f32. `split` pieces of K per tile (combined in a fixed order by the tile's
// last block) where the tiles alone are few.
struct GemvParams {
  int vector_width = 8;  // weight elements per load: 16 bytes where K allows
  int warps = 4;
  int block = 128;
  int64_t rows = 4;          // weight rows (outputs along N) per warp
  int64_t unroll = 2;        // vectors per lane, row and stage
  int64_t chunk = 0;         // K elements per stage: 32 * unroll * vector_width
  int64_t tiles = 1;         // ceil(N / (warps * rows))
  int64_t split = 1;         // pieces of K per tile
  int64_t piece = 0;         // K elements per piece: a multiple of chunk
  int64_t work = 1;          // tiles * split work items
  int64_t shared_bytes = 0;  // static: the staged x
  // 2 to 16 rows of bf16/f16 A: tensor cores (mma.m16n8k16) instead, each warp `rows` weight
  // rows (16 per mma) over `unroll` steps of 32 K a stage, every lane 8 K of two rows and of x's
  // row (vector_width 8), A read from global memory (no stage); m_tiles: 8-row tiles of A.
  bool mma = false;
  int64_t m_tiles = 1;
  // The kernel loads the next stage's weights before it multiplies this stage's, so that a
  // warp's loads are in flight while it computes (int8 weights, whose widening and products
  // take twice the instructions a byte of bf16 does; the tensor-core kernel, whose warps
  // otherwise waited on each stage's loads with none in flight).
  bool prefetch = false;
  // The CUDA-core kernel stages A's whole piece of K in shared memory once per work item, in A's
  // own dtype (shared_bytes: M * piece elements), before its stages, which then read shared
  // memory only and never wait at a barrier; else A is staged as f32 one stage at a time, with
  // two barriers a stage. Where the piece fits (gemv.cpp: resident_budget).
  bool resident = false;
  // With A resident and 16-byte weight vectors: the weights stream through a ring of `ring`
  // stages in dynamic shared memory, each lane copying (cp.async) and later reading only its own
  // vectors, `ring - 1` stages ahead of the one it multiplies, so that the bytes in flight do
  // not cost registers; the blocks an SM holds are then `ring_blocks` (0: two stages in
  // registers, as above).
  int64_t ring = 0;
  int64_t ring_blocks = 0;
  // An epilogue region (GemvSpec::epilogue) whose every output element reads `groups` outputs of
  // the GEMM N / groups apart (silu(gate) * up of a fused gate/up projection: 2): each warp's
  // `rows` weight rows are `groups` pieces of rows / groups, one in each run of N / groups, so
  // that a warp holds every sum an element reads (the CUDA-core variant only). tiles is
  // ceil(N / (warps * rows)) still.
  int64_t groups = 1;
  ParamFields fields() const;
};

using ScheduleParams = std::variant<PointwiseParams, TransposeParams, RowParams, ColumnParams,
                                    AttentionParams, GemvParams>;

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual std::string_view name() const = 0;
  // Nothing when it takes the region; else why not, in words a plan can show. (A scheduler may
  // weigh its own parameters to decide: the column kernel refuses few long columns it cannot
  // split.)
  virtual std::optional<std::string> refusal(const RegionInfo& info,
                                             const CodegenOptions& options) const = 0;
  // The parameters for a region it takes. Throws NotSizeIndependent where a dynamic kernel
  // (RegionInfo::make_dynamic) gets none from it: where it would need the value of a size that
  // changes with the symbols.
  virtual ScheduleParams params(const RegionInfo& info, const CodegenOptions& options) const = 0;
  // The kernel of those parameters (the kernel name is kKernelNameToken; generate names it).
  virtual KernelBody build(const RegionInfo& info, const CodegenOptions& options,
                           const ScheduleParams& params) const = 0;
  // The variants a dynamic instantiation has besides its kernel for every size, numbered 1..n
  // (RegionInfo::row_path: the register paths of a looped row kernel); 0: none.
  virtual int variants(const RegionInfo&, const CodegenOptions&) const { return 0; }
};

// The schedulers, each defined in its own file and registered in registry.cpp's table, whose
// order is the order asked.
const std::vector<const Scheduler*>& schedulers();

// A scheduler's answer for one region: nothing when it takes it, else why not.
struct Verdict {
  std::string_view scheduler;
  std::optional<std::string> refusal;
};
// Every scheduler's verdict, in order.
std::vector<Verdict> verdicts(const RegionInfo& info, const CodegenOptions& options);
// The first scheduler that takes the region; InternalError, naming every refusal, when none does.
const Scheduler& scheduler_for(const RegionInfo& info, const CodegenOptions& options);

// A region's schedule: the first scheduler that takes it, its parameters, and the refusals of
// the schedulers asked before it. InternalError when none takes it.
struct Schedule {
  const Scheduler* scheduler = nullptr;
  ScheduleParams params;
  std::vector<Verdict> refused;
};
Schedule schedule(const RegionInfo& info, const CodegenOptions& options);
// The same for a static kernel of a pointwise, reduction, normalization or attention region.
Schedule schedule(const ir::Graph& g, const fusion::Region& region,
                  const CodegenOptions& options = {});

// `name{field=value, ...}`: one line, fields in declaration order (lists as [a, b]).
std::string params_text(std::string_view scheduler, const ScheduleParams& params);
std::string schedule_text(const Schedule& s);
// A stable hash of the scheduler's name and its parameters (XXH3 of params_text): the same in
// every run and build.
uint64_t params_hash(std::string_view scheduler, const ScheduleParams& params);
// The fields of whichever parameters these are.
ParamFields param_fields(const ScheduleParams& params);

}  // namespace fusejit::templates
