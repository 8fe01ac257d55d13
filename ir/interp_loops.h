// ir/interp_loops: the pieces the CPU reference interpreter (interp.cpp, interp_reduce.cpp)
// shares: how a node's value is held while interpreting, strided iteration spaces, and the
// thread split. Private to the interpreter; nothing outside ir/interp*.cpp includes it.
//
// Values of floating dtypes are held as float: every f32, f16 and bf16 value is exactly a float,
// so nothing is lost, and memory and bandwidth are half of double's. Arithmetic is still done in
// double; store_span rounds each result to its dtype as it is stored. i32, i64 and bool are
// held as int64_t, so that integer arithmetic wraps exactly as on the GPU (a double cannot hold
// an i32 product or an i64 beyond 2^53).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "fusejit/error.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/shape.h"

namespace fusejit::ir::interp_detail {

// True for the dtypes held as int64_t.
inline bool held_as_int(DType d) { return !is_floating(d); }

// What a value of element type T is computed in before it is stored: double for floats.
template <class T>
using Compute = std::conditional_t<std::is_same_v<T, float>, double, int64_t>;

// One node's value: numel(shape) elements. Exactly one of `f` and `i` is set. Storage is
// shared and immutable, so a reshape is free, an input can alias the caller's tensor, and
// freeing a value is dropping a reference.
struct Value {
  Shape shape;
  std::shared_ptr<const float[]> f;
  std::shared_ptr<const int64_t[]> i;

  template <class T>
  const T* data() const {
    if constexpr (std::is_same_v<T, float>) {
      if (!f) throw InternalError("interpreter: value is not held as float");
      return f.get();
    } else {
      static_assert(std::is_same_v<T, int64_t>);
      if (!i) throw InternalError("interpreter: value is not held as int64");
      return i.get();
    }
  }

  template <class T>
  static Value of(Shape shape, std::shared_ptr<const T[]> data) {
    Value v;
    v.shape = std::move(shape);
    if constexpr (std::is_same_v<T, float>)
      v.f = std::move(data);
    else
      v.i = std::move(data);
    return v;
  }
};

// Storage for n elements, left uninitialized: every element is written once, by the thread
// that computes it (so large buffers are also first touched in parallel).
template <class T>
std::shared_ptr<T[]> allocate(int64_t n) {
  try {
    return std::make_shared_for_overwrite<T[]>(static_cast<size_t>(n));
  } catch (const std::bad_alloc&) {
    const int64_t bytes = n * static_cast<int64_t>(sizeof(T));  // n is a valid tensor's count
    throw OutOfMemoryError(
        fmt::format("CPU reference: cannot allocate {} bytes of host memory for a value of {} "
                    "elements",
                    bytes, n),
        bytes);
  }
}

// Wrapping integer arithmetic: computed modulo 2^64 (store_span then wraps i32 results modulo
// 2^32, which commutes with +, - and *).
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// Rounds n computed values to the dtype `d` and stores them: the storage rounding of every
// node's result. The switch is per span, not per element.
inline void store_span(DType d, const double* src, float* dst, int64_t n) {
  switch (d) {
    case DType::f32:
      for (int64_t k = 0; k < n; ++k) dst[k] = static_cast<float>(src[k]);
      return;
    case DType::f16:
    case DType::bf16:
      for (int64_t k = 0; k < n; ++k) dst[k] = static_cast<float>(round_to(d, src[k]));
      return;
    default:
      throw InternalError(fmt::format("interpreter: {} values held as float", dtype_name(d)));
  }
}
inline void store_span(DType d, const int64_t* src, int64_t* dst, int64_t n) {
  switch (d) {
    case DType::i32:
      for (int64_t k = 0; k < n; ++k) {
        dst[k] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(src[k])));
      }
      return;
    case DType::i64:
      std::copy_n(src, n, dst);
      return;
    case DType::i8:
      for (int64_t k = 0; k < n; ++k) {
        dst[k] = static_cast<int8_t>(static_cast<uint8_t>(static_cast<uint64_t>(src[k])));
      }
      return;
    case DType::boolean:
      for (int64_t k = 0; k < n; ++k) dst[k] = src[k] != 0 ? 1 : 0;
      return;
    default:
      throw InternalError(fmt::format("interpreter: {} values held as int64", dtype_name(d)));
  }
}

// Results are computed into blocks of this many values on the stack, then stored.
inline constexpr int64_t kBlock = 256;

// Below this much work (elements touched, or multiply-adds) a loop runs on the calling thread.
inline constexpr int64_t kParallelMinWork = int64_t{1} << 20;

// Calls fn(begin, end) over [0, n) split into contiguous ranges, one per thread when `work` is
// large. Each index lands in exactly one range, so results never depend on the thread count.
template <class Fn>
void parallel_for(int64_t n, int64_t work, Fn fn) {
  int64_t threads = 1;
  if (work >= kParallelMinWork) {
    threads = std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), n);
  }
  if (threads <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  const int64_t chunk = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t begin = chunk; begin < n; begin += chunk) {
    pool.emplace_back(fn, begin, std::min(n, begin + chunk));
  }
  fn(int64_t{0}, std::min(n, chunk));
  for (std::thread& t : pool) t.join();
}

// Element strides of a row-major tensor of shape `from` read as if broadcast to `to` (numpy
// rules: dimensions aligned from the right; a size-1 or missing dimension has stride 0).
inline std::vector<int64_t> broadcast_strides(const Shape& from, const Shape& to) {
  const std::vector<int64_t> own = contiguous_strides(from);
  std::vector<int64_t> out(to.size(), 0);
  const size_t off = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) {
    if (from[d] != 1) out[off + d] = own[d];
  }
  return out;
}

// An iteration space: a row-major walk over `dims` that reads N operands, each through its own
// element strides. Built by make_space, which drops size-1 dimensions and merges neighbours
// that every operand walks contiguously, so most spaces end up with one or two dimensions.
template <size_t N>
struct Space {
  std::vector<int64_t> dims;                    // never empty
  std::array<std::vector<int64_t>, N> strides;  // per operand, one per dim

  int64_t inner_stride(size_t k) const { return strides[k].back(); }
};

template <size_t N>
Space<N> make_space(const Shape& shape, std::array<std::vector<int64_t>, N> strides) {
  Space<N> s;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !s.dims.empty();
    for (size_t k = 0; merge && k < N; ++k) {
      merge = s.strides[k].back() == strides[k][d] * shape[d];
    }
    if (merge) {
      s.dims.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) s.strides[k].back() = strides[k][d];
    } else {
      s.dims.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) s.strides[k].push_back(strides[k][d]);
    }
  }
  if (s.dims.empty()) {
    s.dims.push_back(1);
    for (size_t k = 0; k < N; ++k) s.strides[k].push_back(0);
  }
  return s;
}

// The operand offsets of the element at row-major position `index` of the space.
template <size_t N>
std::array<int64_t, N> offsets_at(const Space<N>& s, int64_t index) {
  std::array<int64_t, N> off{};
  for (size_t d = s.dims.size(); d-- > 0;) {
    const int64_t i = index % s.dims[d];
    index /= s.dims[d];
    for (size_t k = 0; k < N; ++k) off[k] += i * s.strides[k][d];
  }
  return off;
}

// Walks positions [begin, end) of the space in row-major order, calling
// row(position, offsets, count) once per run along the innermost dimension: the run covers
// positions position .. position+count-1, and operand k's element j of the run is at
// offsets[k] + j * s.inner_stride(k).
template <size_t N, class Row>
void for_rows(const Space<N>& s, int64_t begin, int64_t end, Row row) {
  const size_t rank = s.dims.size();
  int64_t small[8];
  std::vector<int64_t> large;
  int64_t* idx = small;
  if (rank > 8) {
    large.resize(rank);
    idx = large.data();
  }
  std::array<int64_t, N> off{};
  int64_t rest = begin;
  for (size_t d = rank; d-- > 0;) {
    idx[d] = rest % s.dims[d];
    rest /= s.dims[d];
    for (size_t k = 0; k < N; ++k) off[k] += idx[d] * s.strides[k][d];
  }
  const size_t last = rank - 1;
  const int64_t inner = s.dims[last];
  for (int64_t pos = begin; pos < end;) {
    const int64_t count = std::min(inner - idx[last], end - pos);
    row(pos, off, count);
    pos += count;
    if (pos >= end) break;
    // The run ended at the end of a row: go back to its start and carry into outer dims.
    for (size_t k = 0; k < N; ++k) off[k] -= idx[last] * s.strides[k][last];
    idx[last] = 0;
    for (size_t d = last; d-- > 0;) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) off[k] += s.strides[k][d];
      if (idx[d] < s.dims[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= s.dims[d] * s.strides[k][d];
      idx[d] = 0;
    }
  }
}

// The accumulating ops, in interp_reduce.cpp.
Value eval_reduce(const Node& n, const Value& x);
Value eval_matmul(const Node& n, const Value& a, const Value& b);
// Positions rather than values, in interp_gather.cpp.
Value eval_gather(const Node& n, const Value& x, const Value& idx);
Value eval_random(const Node& n, const Value& key);
// dst with src written along the update's axis from the position `start` holds (update_start).
Value eval_update(const Node& n, const Value& dst, const Value& src, const Value& start);

}  // namespace fusejit::ir::interp_detail
