// Index arithmetic for views (templates/kir/index.h): what offsets print as, and how they move over
// vector lanes.
#include "templates/kir/index.h"
#include "fusejit/error.h"
#include "support/catch.h"
#include "templates/kir/kir.h"

using namespace fusejit;
using namespace fusejit::templates;

namespace {

// Roots over variables of their own, which the offsets print by name.
BasePtr root(const char* name, int64_t bound) {
  return make_root(kir::variable("int", name), bound);
}
BasePtr lane_root(const char* name, const char* lane0, int64_t bound, int vector) {
  return make_lane_root(kir::variable("int", name), kir::variable("int", lane0), bound, vector);
}

}  // namespace

TEST_CASE("a root splits over a shape and prints back as itself", "[templates][index]") {
  const BasePtr i = root("i", 24);
  const Index at = index_from_root(i, {2, 3, 4});
  CHECK(offset(at) == "i");
  CHECK(offset(reshape_operand(at, {6, 4})) == "i");
  CHECK(offset(reshape_operand(reshape_operand(at, {24}), {4, 6})) == "i");
  // The middle coordinate alone: (i / 4) % 3.
  const Index middle = broadcast_operand(at, {1, 3, 1});
  CHECK(offset(middle) == "i / 4 % 3");
  CHECK(offset(broadcast_operand(at, {4})) == "i % 4");
  CHECK(offset(broadcast_operand(at, {2, 1, 1})) == "i / 12");
  CHECK(offset(broadcast_operand(at, {1})) == "0");
}

TEST_CASE("permutes reorder digits", "[templates][index]") {
  const BasePtr i = root("i", 6);
  const Index at = index_from_root(i, {2, 3});          // result of permute([3,2], {1,0})
  const Index x = permute_operand(at, {1, 0}, {3, 2});  // the operand, [3,2]
  CHECK(offset(x) == "(i % 3) * 2 + i / 3");
  // Permuting back restores the plain index.
  CHECK(offset(permute_operand(x, {1, 0}, {2, 3})) == "i");
}

TEST_CASE("a reshape that cuts through digits names the position opaquely", "[templates][index]") {
  const BasePtr i = root("i", 24);
  const Index at = index_from_root(i, {4, 6});
  const Index x = permute_operand(at, {1, 0}, {6, 4});  // digits (i % 6), (i / 6)
  const Index r = reshape_operand(x, {4, 6});           // 6 * 4 regrouped as 4 * 6: opaque
  CHECK(offset(r) == "((i % 6) * 4 + i / 6)");
  CHECK(offset(broadcast_operand(r, {6})) == "((i % 6) * 4 + i / 6) % 6");
}

TEST_CASE("row and element roots", "[templates][index]") {
  const BasePtr row = root("row", 32);
  const BasePtr k = root("k", 1000);
  // x: [4, 8, 1000], rows over the first two axes.
  Index at{{4, 8, 1000}, {}};
  const Index rows = index_from_root(row, {4, 8});
  at.axes = {rows.axes[0], rows.axes[1], index_from_root(k, {1000}).axes[0]};
  CHECK(offset(at) == "row * 1000 + k");
  // A statistic broadcast back over the row, [4, 8, 1], reads element `row`.
  CHECK(offset(broadcast_operand(at, {4, 8, 1})) == "row");
  CHECK(offset(reshape_operand(broadcast_operand(at, {4, 8, 1}), {32})) == "row");
  CHECK(uses(at, k));
  CHECK_FALSE(uses(broadcast_operand(at, {4, 8, 1}), k));
}

TEST_CASE("lanes: contiguous or broadcast or strided", "[templates][index]") {
  const BasePtr i = lane_root("i", "i0", 64 * 256, 4);
  const Index at = index_from_root(i, {64, 256});
  CHECK(lane(at) == Lane::unit);
  CHECK(offset(at, true) == "i0");
  CHECK(lane(broadcast_operand(at, {256})) == Lane::unit);  // a bias along the rows
  CHECK(offset(broadcast_operand(at, {256}), true) == "i0 % 256");
  CHECK(lane(broadcast_operand(at, {64, 1})) == Lane::none);           // one value per row
  CHECK(lane(permute_operand(at, {1, 0}, {256, 64})) == Lane::other);  // transposed
  CHECK(lane(reshape_operand(at, {16384})) == Lane::unit);
  // Rows of 6 with vectors of 4 would cross rows: a broadcast along them is not contiguous.
  const BasePtr j = lane_root("i", "i0", 48, 4);
  const Index odd = index_from_root(j, {8, 6});
  CHECK(lane(odd) == Lane::unit);
  CHECK(lane(broadcast_operand(odd, {6})) == Lane::other);
  CHECK_THROWS_AS(lane_root("i", "i0", 6, 4), InternalError);
}

TEST_CASE("a slice offsets and strides its axis", "[templates][index]") {
  const BasePtr i = root("i", 4 * 32);
  const Index at = index_from_root(i, {4, 32});  // x[:, 64:] of x [4,96]
  CHECK(offset(slice_operand(at, 1, 64, 1, {4, 96})) == "(i / 32) * 96 + (i % 32 + 64)");
  // Every other element, from 1: x[:, 1::2] of x [4,64].
  CHECK(offset(slice_operand(at, 1, 1, 2, {4, 64})) == "(i / 32) * 64 + ((i % 32) * 2 + 1)");
  // A slice of a slice composes: x[:, 8:][:, 2:] reads x's column 10 on.
  const Index inner = slice_operand(at, 1, 2, 1, {4, 34});
  CHECK(offset(slice_operand(inner, 1, 8, 1, {4, 42})) == "(i / 32) * 42 + ((i % 32 + 2) + 8)");
  // A slice of extent 1 is its start.
  const Index one = index_from_root(root("r", 4), {4, 1});
  CHECK(offset(slice_operand(one, 1, 5, 1, {4, 8})) == "r * 8 + (5)");
}

TEST_CASE("a slice keeps vector lanes when its start keeps their alignment", "[templates][index]") {
  const Index at = index_from_root(lane_root("i", "i0", 4 * 64, 4), {4, 64});
  CHECK(lane(slice_operand(at, 1, 64, 1, {4, 128})) == Lane::unit);
  CHECK(offset(slice_operand(at, 1, 64, 1, {4, 128}), true) == "(i0 / 64) * 128 + (i0 % 64 + 64)");
  CHECK(lane(slice_operand(at, 1, 2, 1, {4, 128})) == Lane::other);  // misaligned start
  CHECK(lane(slice_operand(at, 1, 0, 2, {4, 128})) == Lane::other);  // stride 2
  CHECK(lane(slice_operand(at, 0, 1, 1, {5, 64})) == Lane::unit);    // another axis
}

TEST_CASE("a concat's operands are read in range everywhere", "[templates][index]") {
  const BasePtr i = root("i", 4 * 10);
  const Index at = index_from_root(i, {4, 10});  // concat of [4,3], [4,5], [4,2] along axis 1
  CHECK(offset(axis_coordinate(at, 1)) == "i % 10");
  CHECK(offset(concat_operand(at, 1, 0, {4, 3})) == "(i / 10) * 3 + (i % 10) % 3");
  // Offset 3, extent 5: (c + 2) % 5 is c - 3 for c in [3, 8).
  CHECK(offset(concat_operand(at, 1, 3, {4, 5})) == "(i / 10) * 5 + (i % 10 + 2) % 5");
  // Offset 8, extent 2: (c + 0) % 2 is c - 8 for c in [8, 10).
  CHECK(offset(concat_operand(at, 1, 8, {4, 2})) == "(i / 10) * 2 + (i % 10) % 2");
  const Index lanes = index_from_root(lane_root("i", "i0", 4 * 128, 4), {4, 128});
  CHECK(lane(concat_operand(lanes, 1, 64, {4, 64})) == Lane::unit);
  CHECK(lane(concat_operand(lanes, 1, 62, {4, 66})) == Lane::other);
}
