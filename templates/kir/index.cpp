// templates/index: digit bookkeeping for views; see index.h.
#include "templates/kir/index.h"

#include <algorithm>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/shape.h"
#include "templates/kir/kir.h"

namespace fusejit::templates {

namespace {

// Drops extent-1 digits and merges neighbours that are consecutive pieces of one base:
// (b / (d*e)) % f followed by (b / d) % e is (b / d) % (f*e).
Digits normalize(const Digits& in) {
  Digits out;
  for (const Digit& d : in) {
    if (d.ext == 1) continue;
    if (!out.empty() && out.back().base == d.base && out.back().div == d.div * d.ext) {
      out.back() = Digit{d.base, d.div, out.back().ext * d.ext};
    } else {
      out.push_back(d);
    }
  }
  return out;
}

kir::ExprP base_expr(const Base& b, bool lane0, RuntimeExtents* rt);

// A number of the index arithmetic: with `rt` (a dynamic kernel), one that stands for a runtime
// extent is its argument fj_e<k>.
kir::ExprP number(int64_t n, RuntimeExtents* rt) {
  if (rt == nullptr || !rt->runtime(n)) return kir::lit(n);
  const int k = rt->argument(n);  // (registers it, with its variables)
  return kir::var(rt->extent_vars[k]);
}

// "b / d % e" with the parts that are no-ops left out; `compound` tells whether it has an
// operator (and needs parentheses before a multiplication). With `rt` (a dynamic kernel), a
// divisor or extent that stands for a runtime extent divides by its argument (fj_fastdiv,
// fj_fastmod), and the modulo is left out only where d * e is the base's bound itself: a
// comparison of two products of symbols at one instantiation says nothing about other sizes.
kir::ExprP digit_expr(const Digit& d, bool lane0, bool& compound, RuntimeExtents* rt) {
  kir::ExprP e = base_expr(*d.base, lane0, rt);
  compound = false;
  const bool div_rt = rt != nullptr && rt->runtime(d.div);
  const bool ext_rt = rt != nullptr && rt->runtime(d.ext);
  const bool any_rt = div_rt || ext_rt || (rt != nullptr && rt->runtime(d.base->bound));
  if (d.div > 1) {
    if (div_rt) {
      const int k = rt->argument(d.div);
      e = kir::call("fj_fastdiv", {e, kir::var(rt->multiplier_vars[k])});
    } else {
      e = kir::infix(e, "/", kir::lit(d.div));
    }
    compound = !div_rt;
  }
  const bool modulo = any_rt ? d.div * d.ext != d.base->bound : d.div * d.ext < d.base->bound;
  if (modulo) {
    if (ext_rt) {
      const int k = rt->argument(d.ext);
      e = kir::call("fj_fastmod",
                    {e, kir::var(rt->extent_vars[k]), kir::var(rt->multiplier_vars[k])});
    } else {
      e = kir::infix(e, "%", kir::lit(d.ext));
    }
    compound = !ext_rt;
  }
  if (rt != nullptr && (div_rt || (modulo && ext_rt))) rt->dividend_below(d.base->bound);
  return e;
}

// A base of make_zero: opaque, with no terms and no constant.
bool is_zero(const Base& b) { return !b.var && b.terms.empty() && b.constant == 0; }

// The sum of digit * place (then the constant), left to right; "0" for none.
kir::ExprP terms_expr(const std::vector<std::pair<Digit, int64_t>>& terms, bool lane0,
                      int64_t constant = 0, RuntimeExtents* rt = nullptr) {
  kir::ExprP sum;
  const auto plus = [&](kir::ExprP term) { sum = sum ? kir::add(sum, term) : term; };
  for (const auto& [digit, place] : terms) {
    if (is_zero(*digit.base)) continue;
    bool compound = false;
    kir::ExprP d = digit_expr(digit, lane0, compound, rt);
    kir::ExprP p = number(place, rt);
    // * / % bind tighter than +: a digit needs parentheses only before its place value.
    plus(place == 1 ? d : kir::mul(compound ? kir::group(d) : d, p));
  }
  if (constant != 0) plus(number(constant, rt));
  return sum ? sum : kir::lit(0);
}

kir::ExprP base_expr(const Base& b, bool lane0, RuntimeExtents* rt) {
  if (b.var) return kir::var(lane0 && b.lane_root ? b.lane0 : b.var);
  return kir::group(terms_expr(b.terms, lane0, b.constant, rt));
}

std::vector<std::pair<Digit, int64_t>> with_places(const Digits& flat) {
  std::vector<std::pair<Digit, int64_t>> terms(flat.size());
  int64_t place = 1;
  for (size_t i = flat.size(); i-- > 0;) {
    terms[i] = {flat[i], place};
    place *= flat[i].ext;
  }
  return terms;
}

// How one digit of a lane-moving base moves: with b = b0 + j, b0 % V == 0, j < V,
// (b / d) is constant when V divides d, and (b % e) moves by one per lane when V divides e.
Lane digit_lane(const Digit& d) {
  const Base& b = *d.base;
  if (b.lane != Lane::unit) return b.lane;
  const int64_t v = b.vector;
  if (d.div % v == 0) return Lane::none;
  if (d.div == 1 && (d.ext % v == 0 || d.ext >= b.bound)) return Lane::unit;
  return Lane::other;
}

// A sum of digit * place moves by one per lane when exactly one digit does, with place 1, and
// every other place is a multiple of V (so the lane-0 offset is a multiple of V too).
std::pair<Lane, int> terms_lane(const std::vector<std::pair<Digit, int64_t>>& terms) {
  int units = 0;
  int vector = 1;
  bool unit_ok = true;
  for (const auto& [digit, place] : terms) {
    const Lane l = digit_lane(digit);
    if (l == Lane::other) return {Lane::other, digit.base->vector};
    if (l == Lane::unit) {
      ++units;
      vector = digit.base->vector;
      if (place != 1) unit_ok = false;
    }
  }
  if (units == 0) return {Lane::none, 1};
  if (units > 1 || !unit_ok) return {Lane::other, vector};
  for (const auto& [digit, place] : terms) {
    if (digit_lane(digit) == Lane::none && place % vector != 0) return {Lane::other, vector};
  }
  return {Lane::unit, vector};
}

// An opaque base: the sum of `terms` plus `constant`, below `bound`. It moves by one element per
// lane when its terms do and the constant keeps the lane-0 value a multiple of V.
BasePtr make_opaque(std::vector<std::pair<Digit, int64_t>> terms, int64_t constant,
                    int64_t bound) {
  auto opaque = std::make_shared<Base>();
  opaque->terms = std::move(terms);
  opaque->constant = constant;
  opaque->bound = bound;
  std::tie(opaque->lane, opaque->vector) = terms_lane(opaque->terms);
  if (opaque->lane == Lane::unit && constant % opaque->vector != 0) opaque->lane = Lane::other;
  return opaque;
}

// Splits the digits at the axis boundaries of `shape`, from the least significant end;
// false when a boundary falls where no digit can be split exactly.
bool regroup(Digits flat, const Shape& shape, Index& out) {
  out.shape = shape;
  out.axes.assign(shape.size(), {});
  size_t pos = flat.size();
  for (size_t axis = shape.size(); axis-- > 0;) {
    int64_t need = shape[axis];
    Digits taken;
    while (need > 1) {
      if (pos == 0) return false;
      Digit& d = flat[pos - 1];
      if (d.ext <= need && need % d.ext == 0) {
        taken.push_back(d);
        need /= d.ext;
        --pos;
      } else if (d.ext > need && d.ext % need == 0) {
        taken.push_back(Digit{d.base, d.div, need});
        d = Digit{d.base, d.div * need, d.ext / need};
        need = 1;
      } else {
        return false;
      }
    }
    std::reverse(taken.begin(), taken.end());
    out.axes[axis] = std::move(taken);
  }
  return pos == 0;
}

bool uses_digits(const Digits& digits, const BasePtr& root) {
  for (const Digit& d : digits) {
    if (d.base == root) return true;
    for (const auto& [inner, place] : d.base->terms) {
      if (uses_digits({inner}, root)) return true;
    }
  }
  return false;
}

}  // namespace

BasePtr make_root(VarP var, int64_t bound) {
  auto b = std::make_shared<Base>();
  b->var = std::move(var);
  b->bound = bound;
  return b;
}

BasePtr make_lane_root(VarP var, VarP lane0, int64_t bound, int vector) {
  if (vector < 1 || bound % vector != 0) {
    throw InternalError(
        fmt::format("lane root {} of bound {} with vector width {}", var->name, bound, vector));
  }
  auto b = std::make_shared<Base>();
  b->var = std::move(var);
  b->lane0 = std::move(lane0);
  b->bound = bound;
  b->lane_root = true;
  b->lane = Lane::unit;
  b->vector = vector;
  return b;
}

BasePtr make_zero(int64_t bound) {
  auto b = std::make_shared<Base>();
  b->bound = bound;
  return b;
}

BasePtr make_data_root(VarP var, int64_t bound) {
  auto b = std::make_shared<Base>();
  b->var = std::move(var);
  b->bound = bound;
  b->lane = Lane::other;
  return b;
}

Index gather_operand(const Index& at, const Shape& operand, size_t axis, const BasePtr& position) {
  Index out{operand, std::vector<Digits>(operand.size())};
  for (size_t d = 0; d < operand.size(); ++d) {
    if (operand[d] == 1) continue;
    if (d == axis) {
      out.axes[d] = {Digit{position, 1, operand[d]}};
    } else if (operand[d] == at.shape[d]) {
      out.axes[d] = at.axes[d];
    } else {
      // The coordinate is below at.shape[d] < operand[d]: one digit of the operand's extent
      // over the coordinate's value (printed without a modulo, since it never reaches it).
      auto coordinate = std::make_shared<Base>();
      coordinate->terms = with_places(normalize(at.axes[d]));
      coordinate->bound = at.shape[d];
      std::tie(coordinate->lane, coordinate->vector) = terms_lane(coordinate->terms);
      out.axes[d] = {Digit{coordinate, 1, operand[d]}};
    }
  }
  return out;
}

Index index_from_digits(const Digits& flat_in, const Shape& shape) {
  const Digits flat = normalize(flat_in);
  int64_t total = 1;
  for (const Digit& d : flat) total *= d.ext;
  if (total != ir::numel(shape)) {
    throw InternalError(
        fmt::format("index over {} elements used for shape {}", total, ir::shape_str(shape)));
  }
  Index out;
  if (regroup(flat, shape, out)) return out;
  // The boundaries do not fall between digits: name the linear position as one opaque value.
  const BasePtr opaque = make_opaque(with_places(flat), 0, total);
  const bool ok = regroup({Digit{opaque, 1, total}}, shape, out);
  if (!ok) throw InternalError("index regroup of a single digit failed");
  return out;
}

Index index_from_root(const BasePtr& root, const Shape& shape) {
  return index_from_digits({Digit{root, 1, root->bound}}, shape);
}

Digits flatten(const Index& at) {
  Digits flat;
  for (const Digits& axis : at.axes) flat.insert(flat.end(), axis.begin(), axis.end());
  return normalize(flat);
}

Index broadcast_operand(const Index& at, const Shape& operand) {
  if (operand.size() > at.shape.size()) {
    throw InternalError(
        fmt::format("broadcast of {} to {}", ir::shape_str(operand), ir::shape_str(at.shape)));
  }
  const size_t lead = at.shape.size() - operand.size();
  Index out{operand, std::vector<Digits>(operand.size())};
  for (size_t k = 0; k < operand.size(); ++k) {
    if (operand[k] == 1) continue;
    if (operand[k] != at.shape[k + lead]) {
      throw InternalError(
          fmt::format("broadcast of {} to {}", ir::shape_str(operand), ir::shape_str(at.shape)));
    }
    out.axes[k] = at.axes[k + lead];
  }
  return out;
}

Index permute_operand(const Index& at, const std::vector<int64_t>& perm, const Shape& operand) {
  Index out{operand, std::vector<Digits>(operand.size())};
  for (size_t i = 0; i < perm.size(); ++i) out.axes[static_cast<size_t>(perm[i])] = at.axes[i];
  return out;
}

Index reshape_operand(const Index& at, const Shape& operand) {
  return index_from_digits(flatten(at), operand);
}

namespace {

// `at` with operand axis `axis` of extent `extent` indexed by one digit of `base` (none when the
// extent is 1: its coordinate is 0).
Index with_axis(const Index& at, int64_t axis, const Shape& operand, const BasePtr& base,
                int64_t ext) {
  Index out = at;
  out.shape = operand;
  const size_t a = static_cast<size_t>(axis);
  out.axes[a].clear();
  if (operand[a] > 1) out.axes[a].push_back(Digit{base, 1, ext});
  return out;
}

std::vector<std::pair<Digit, int64_t>> axis_terms(const Index& at, int64_t axis, int64_t scale) {
  std::vector<std::pair<Digit, int64_t>> terms =
      with_places(normalize(at.axes[static_cast<size_t>(axis)]));
  for (auto& term : terms) term.second *= scale;
  return terms;
}

}  // namespace

Index slice_operand(const Index& at, int64_t axis, int64_t start, int64_t step,
                    const Shape& operand) {
  const int64_t extent = operand[static_cast<size_t>(axis)];
  const BasePtr base = make_opaque(axis_terms(at, axis, step), start, extent);
  return with_axis(at, axis, operand, base, extent);
}

Index concat_operand(const Index& at, int64_t axis, int64_t offset, const Shape& operand) {
  const int64_t extent = operand[static_cast<size_t>(axis)];
  const int64_t wrap = (offset + extent - 1) / extent * extent - offset;
  const int64_t bound = at.shape[static_cast<size_t>(axis)] + wrap;
  return with_axis(at, axis, operand, make_opaque(axis_terms(at, axis, 1), wrap, bound), extent);
}

Index axis_coordinate(const Index& at, int64_t axis) {
  const size_t a = static_cast<size_t>(axis);
  return Index{Shape{at.shape[a]}, {at.axes[a]}};
}

kir::ExprP offset_expr(const Digits& flat, bool lane0, RuntimeExtents* runtime) {
  return terms_expr(with_places(normalize(flat)), lane0, 0, runtime);
}

kir::ExprP offset_expr(const Index& at, bool lane0, RuntimeExtents* runtime) {
  return offset_expr(flatten(at), lane0, runtime);
}

std::string offset(const Digits& flat, bool lane0) { return kir::print(offset_expr(flat, lane0)); }

std::string offset(const Index& at, bool lane0) { return kir::print(offset_expr(at, lane0)); }

Lane lane(const Index& at) { return terms_lane(with_places(flatten(at))).first; }

bool uses(const Index& at, const BasePtr& root) { return uses_digits(flatten(at), root); }

namespace {

void collect_variables(const Digits& digits, bool lane0, std::vector<VarP>& out) {
  for (const Digit& d : digits) {
    const Base& b = *d.base;
    if (b.var) {
      const VarP& v = lane0 && b.lane_root ? b.lane0 : b.var;
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
    for (const auto& [inner, place] : b.terms) collect_variables({inner}, lane0, out);
  }
}

}  // namespace

namespace {

void add_key(const std::vector<std::pair<Digit, int64_t>>& terms, IndexKey& key) {
  for (const auto& [d, place] : terms) {
    if (!d.base->var) {
      key.names.emplace_back("(");
      add_key(d.base->terms, key);
      key.names.emplace_back(")");
      key.numbers.push_back(d.base->constant);
    } else {
      key.names.push_back(d.base->var->name);
    }
    key.numbers.insert(key.numbers.end(), {d.div, d.ext, place});
  }
}

}  // namespace

IndexKey index_key(const Index& at) {
  IndexKey key;
  add_key(with_places(flatten(at)), key);
  return key;
}

std::vector<VarP> variables(const Index& at, bool lane0) {
  std::vector<VarP> out;
  collect_variables(flatten(at), lane0, out);
  return out;
}

}  // namespace fusejit::templates
