// templates/index: symbolic element indices, the index arithmetic that views compile to.
//
// A kernel walks an iteration space with a few loop variables (roots: the element `i`, the
// row `row` and the position `k` within it, ...). The index of an element of any node is kept
// as mixed-radix digits over those roots: per axis, a list of digits, most significant
// first, whose extents multiply to the axis extent; a digit is (base / div) % ext for a root
// (or an opaque expression) `base`. Views are then digit bookkeeping, never copies:
//   broadcast / expand: an axis of extent 1 gets no digits (its coordinate is 0);
//   permute:            the axes' digit lists are reordered;
//   reshape:            the digits are concatenated and regrouped at the new axis boundaries,
//                       splitting a digit (b / d) % (e1*e2) into (b / (d*e2)) % e1 and
//                       (b / d) % e2 where a boundary falls inside it;
//   slice:              the axis gets one digit over an opaque base, start + step * (the
//                       axis's coordinate);
//   concat:             operand k's axis gets one digit (c + K) % n_k over an opaque base, with c
//                       the result's coordinate, n_k the operand's extent and K the least
//                       multiple of n_k at or above its offset, less the offset: c - offset
//                       where the result takes operand k, and an element in range elsewhere,
//                       so that every operand can be read (and loads hoisted) wherever the
//                       kernel picks among them.
// Printing merges adjacent digits of one base back together, so that a reshape of a reshape,
// or the row index of a broadcast statistic, prints as the plain root ("row", not
// "(row * 1000 + k) / 1000"). Two indices of a node that print alike name the same element;
// the emitter and the reductions rely on that.
//
// Vector lanes: one root may be the lane root: it runs over b0 + j, j < V, with b0 a multiple
// of V. lane() tells whether an index is the same for all lanes, moves by one element per
// lane (a contiguous, aligned V-element access), or anything else.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fusejit/dtype.h"
#include "templates/kir/fastdiv.h"

namespace fusejit::templates {

namespace kir {
struct Expr;
struct Var;
}

enum class Lane { none, unit, other };

struct Digit;

using VarP = std::shared_ptr<const kir::Var>;

// What a digit divides: a loop variable (a root) or an opaque linear expression of digits.
struct Base {
  VarP var;                // root: the kernel variable; null for an opaque expression
  VarP lane0;              // lane root only: the variable holding b0 (the lane-0 value)
  int64_t bound = 1;       // 0 <= value < bound
  bool lane_root = false;
  Lane lane = Lane::none;  // how the value moves over vector lanes (unit for the lane root)
  int vector = 1;          // V, when lane != none
  std::vector<std::pair<Digit, int64_t>> terms;  // opaque: sum of digit * place ...
  int64_t constant = 0;                           // ... plus this (>= 0)
};
using BasePtr = std::shared_ptr<const Base>;

struct Digit {
  BasePtr base;
  int64_t div = 1;
  int64_t ext = 1;
};

using Digits = std::vector<Digit>;  // most significant first

struct Index {
  Shape shape;
  std::vector<Digits> axes;  // one digit list per axis
};

// A loop variable with 0 <= value < bound.
BasePtr make_root(VarP var, int64_t bound);
// The lane root: value = lane0 + j for lane j < vector; bound % vector == 0.
BasePtr make_lane_root(VarP var, VarP lane0, int64_t bound, int vector);
// A base that is always 0 over a range of `bound` positions: in place of a root, it indexes
// the first element of that root's range (a row's first element, in place of k). Its digits
// print as nothing.
BasePtr make_zero(int64_t bound);

// The index of `shape` whose linear (row-major) position is given by `flat` (digits whose
// extents multiply to numel(shape)).
Index index_from_digits(const Digits& flat, const Shape& shape);
// One root covering the whole of `shape`.
Index index_from_root(const BasePtr& root, const Shape& shape);
// The digits of the linear position, merged and without extent-1 digits.
Digits flatten(const Index& at);

// A kernel variable holding a position loaded at run time (a gather's index, wrapped and
// clamped to [0, bound)): a root whose value may differ between any two vector lanes.
BasePtr make_data_root(VarP var, int64_t bound);
// The data operand's index when `at` indexes the result of gather along `axis`: `position`'s
// value on that axis, `at`'s coordinates on the others (where the index tensor is shorter than
// the operand, they are one opaque digit of the operand's extent).
Index gather_operand(const Index& at, const Shape& operand, size_t axis, const BasePtr& position);

// The operand's index when `at` indexes the result of a view or a broadcast.
Index broadcast_operand(const Index& at, const Shape& operand);  // numpy broadcast or expand
Index permute_operand(const Index& at, const std::vector<int64_t>& perm, const Shape& operand);
Index reshape_operand(const Index& at, const Shape& operand);
// Operand element start + step * c along `axis` for result element c.
Index slice_operand(const Index& at, int64_t axis, int64_t start, int64_t step,
                    const Shape& operand);
// The element of a concat's operand that starts at `offset` along `axis` (see above).
Index concat_operand(const Index& at, int64_t axis, int64_t offset, const Shape& operand);
// The coordinate of `at` along `axis`, as an index of that axis alone.
Index axis_coordinate(const Index& at, int64_t axis);

// The row-major offset of the element as kernel IR: a sum of digits times place values, each
// digit `base / div % ext` with its no-op parts left out (0 for the first element). With
// lane0, the lane root is its lane-0 variable. With `runtime` (a dynamic kernel), the numbers
// that stand for runtime extents are their kernel arguments (templates/kir/fastdiv.h), numbered
// in the order this meets them, and divisions by them are fast divisions.
std::shared_ptr<const kir::Expr> offset_expr(const Index& at, bool lane0 = false,
                                             RuntimeExtents* runtime = nullptr);
std::shared_ptr<const kir::Expr> offset_expr(const Digits& flat, bool lane0 = false,
                                             RuntimeExtents* runtime = nullptr);
// The same (static) offset as C text, for comments and tests.
std::string offset(const Index& at, bool lane0 = false);
std::string offset(const Digits& flat, bool lane0 = false);

Lane lane(const Index& at);
bool uses(const Index& at, const BasePtr& root);
// A structural key of an element: equal keys name the same element of the same shape's
// buffer. Per digit of the flattened index (merged, extent-1 digits dropped): the root's name
// (or the opaque base's terms, bracketed), its divisor, extent and place value. Keys compare
// roots by name: the memo of one kernel holds one root of each name.
struct IndexKey {
  std::vector<std::string> names;  // root names; "(" and ")" bracket an opaque base's terms
  std::vector<int64_t> numbers;    // div, ext, place per digit
  bool operator<(const IndexKey& o) const {
    return names != o.names ? names < o.names : numbers < o.numbers;
  }
  bool operator==(const IndexKey& o) const { return names == o.names && numbers == o.numbers; }
};
IndexKey index_key(const Index& at);

// The variables the printed offset reads (the roots, or the lane root's lane-0 variable with
// lane0), each once.
std::vector<VarP> variables(const Index& at, bool lane0 = false);

}  // namespace fusejit::templates
