// templates/gemv_prologue: the part of the skinny-GEMM kernel (gemv.cpp) that computes A from
// its producing region instead of loading it (GemvPrologue, gemv.h): the region's inputs as the
// kernel's first parameters, a normalization's row statistics before the first stage, and A's
// element at a flat position, as the region's own kernel would store it.
#pragma once

#include <map>
#include <string>

#include "templates/emit.h"
#include "templates/kir/kir.h"
#include "templates/schedulers/gemv.h"
#include "templates/schedulers/reduction.h"

namespace fusejit::templates {

class GemvPrologueBuilder {
 public:
  explicit GemvPrologueBuilder(const GemvPrologue& prologue);

  // in<k> for each of the region's inputs, in order, appended to f's parameters.
  void add_params(kir::Function& f) const;
  // A normalization's reductions over A's one row: their results declared in `decl` (first),
  // computed in `b` (where every thread of the block, `block` threads, must run it), and read
  // by element() after that. Nothing for a pointwise region.
  void declare_row(kir::Block& decl);
  void reduce_row(kir::Block& b, int block);
  // A's `count` elements from the flat position `first` (row-major over A's shape; a multiple
  // of count, and count divides A's size) into the f32 array `out`, each rounded to A's dtype
  // first, as the region's kernel would have stored it; inputs that move with the element are
  // read in vectors of up to 16 bytes. Its statements go to `b`; call it once per block (its
  // names are not made unique across calls).
  void elements(kir::Block& b, const kir::ExprP& first, int count, const kir::ExprP& out);

 private:
  // Lanes of the vectors the region's inputs are read in: at most 16 bytes of its narrowest
  // buffer, dividing `count` and A's size.
  int lanes(int64_t count) const;

  RegionInfo info_;
  bool vectorize_ = true;
  ir::NodeId a_ = -1;
  ReduceSpace space_;                         // a normalization's reductions (one pass)
  std::map<ir::NodeId, kir::ExprP> reduced_;  // reduce node -> its result (reduce_row)
};

}  // namespace fusejit::templates
