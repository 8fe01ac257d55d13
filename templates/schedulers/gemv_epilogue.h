// templates/gemv_epilogue: the part of the skinny-GEMM kernel (gemv.cpp) that evaluates the region
// reading D at the store instead of writing D (GemvEpilogue, gemv.h): how that region reads D
// (whole, or in runs of its last dim), and the region's output element computed from the sums a
// warp holds, as the region's own kernel would compute it from D in memory.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "templates/emit.h"
#include "templates/kir/kir.h"
#include "templates/schedulers/gemv.h"

namespace fusejit::templates {

// How a pointwise region reads D, its one input: whole (groups 1: out[m, j] reads D[m, j]), or
// through slices of D's last dim, each one of `groups` equal runs of it (slice node -> its run).
struct EpilogueReads {
  ir::NodeId d = -1;
  int64_t groups = 1;
  std::map<ir::NodeId, int64_t> runs;
  std::string refusal;  // not empty: the region does not read D so, and why
};
EpilogueReads epilogue_reads(const ir::Graph& g, const fusion::Region& consumer);

class GemvEpilogueBuilder {
 public:
  explicit GemvEpilogueBuilder(const GemvEpilogue& epilogue);

  int64_t groups() const { return reads_.groups; }
  DType output_dtype() const { return info_.node(out_).dtype; }
  // The region's output element (m, j), j < N / groups, stored into `d` (the region's output,
  // [M, N / groups] row-major), from `sums`: the f32 values of D[m, j + c * N / groups] for each
  // run c, as the GEMM's own epilogue leaves them. Each is rounded to D's dtype first, as D in
  // memory would hold it. Call it once per kernel (its names are not made unique across calls).
  void store(kir::Block& b, const kir::ExprP& d, const kir::ExprP& m, const kir::ExprP& j,
             const std::vector<kir::ExprP>& sums);

 private:
  RegionInfo info_;
  EpilogueReads reads_;
  ir::NodeId out_ = -1;
};

}  // namespace fusejit::templates
