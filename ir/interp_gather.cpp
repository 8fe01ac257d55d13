// ir/interp_gather: the CPU reference of the ops that compute positions rather than values:
// gather (x read where an index tensor points), update_slice (a value written where its start
// points) and rand/randn (a pure function of the key's values and the element's position,
// ir/random.h).
//
// Index values follow docs/trace-format.md: a negative index counts from the end once (-1 is
// the last element, as in PyTorch), and what is still outside [0, extent) is clamped to the
// nearest end. Generated kernels do exactly the same (templates/lower.cpp), so the GPU and the
// reference agree on every input and a bad index can never read outside the tensor.
#include <vector>

#include "ir/interp_loops.h"
#include "ir/random.h"
#include "ir/shape.h"

namespace fusejit::ir::interp_detail {

namespace {

template <class T>
Value gather_as(const Node& n, const Value& x, const Value& idx) {
  const Shape& shape = n.shape;  // idx's shape: result position k reads idx element k
  const size_t rank = shape.size();
  const size_t axis = static_cast<size_t>(n.axes.at(0));
  const int64_t extent = x.shape[axis];
  const std::vector<int64_t> strides = contiguous_strides(x.shape);
  const int64_t total = numel(shape);
  const int64_t* ids = idx.data<int64_t>();
  const T* src = x.data<T>();
  std::shared_ptr<T[]> out = allocate<T>(total);
  T* dst = out.get();
  parallel_for(total, total, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> coord(rank);
    for (size_t d = rank, rest = static_cast<size_t>(begin); d-- > 0;) {
      coord[d] = static_cast<int64_t>(rest) % shape[d];
      rest /= static_cast<size_t>(shape[d]);
    }
    for (int64_t k = begin; k < end; ++k) {
      int64_t at = 0;
      for (size_t d = 0; d < rank; ++d) {
        at += (d == axis ? gather_position(ids[k], extent) : coord[d]) * strides[d];
      }
      dst[k] = src[at];
      for (size_t d = rank; d-- > 0;) {  // the next position, row-major
        if (++coord[d] < shape[d]) break;
        coord[d] = 0;
      }
    }
  });
  return Value::of<T>(shape, std::move(out));
}

// dst with src written from position p along the axis: every row of dst's leading axes (the
// ones before the axis) gets src's rows [0, n) at [p, p + n), each a run of n * inner elements.
template <class T>
Value update_as(const Node& n, const Value& dst, const Value& src, int64_t start) {
  const size_t axis = static_cast<size_t>(n.axes.at(0));
  const int64_t extent = n.shape[axis];
  const int64_t length = src.shape[axis];
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= n.shape[d];
  for (size_t d = axis + 1; d < n.shape.size(); ++d) inner *= n.shape[d];
  const int64_t at = update_start(start, length, extent);
  const int64_t total = numel(n.shape);
  std::shared_ptr<T[]> out = allocate<T>(total);
  std::copy(dst.data<T>(), dst.data<T>() + total, out.get());
  const T* from = src.data<T>();
  for (int64_t o = 0; o < outer; ++o) {
    std::copy(from + o * length * inner, from + (o + 1) * length * inner,
              out.get() + (o * extent + at) * inner);
  }
  return Value::of<T>(n.shape, std::move(out));
}

}  // namespace

Value eval_update(const Node& n, const Value& dst, const Value& src, const Value& start) {
  const int64_t p = start.data<int64_t>()[0];
  return dst.f ? update_as<float>(n, dst, src, p) : update_as<int64_t>(n, dst, src, p);
}

Value eval_gather(const Node& n, const Value& x, const Value& idx) {
  return x.f ? gather_as<float>(n, x, idx) : gather_as<int64_t>(n, x, idx);
}

Value eval_random(const Node& n, const Value& key) {
  const uint64_t seed = static_cast<uint64_t>(key.data<int64_t>()[0]);
  const uint64_t offset = static_cast<uint64_t>(key.data<int64_t>()[1]);
  const int64_t total = numel(n.shape);
  std::shared_ptr<float[]> out = allocate<float>(total);
  float* dst = out.get();
  parallel_for(total, total * 16, [&](int64_t begin, int64_t end) {
    double block[kBlock];
    for (int64_t k0 = begin; k0 < end; k0 += kBlock) {
      const int64_t m = std::min(kBlock, end - k0);
      for (int64_t j = 0; j < m; ++j) {
        const uint64_t e = static_cast<uint64_t>(k0 + j);
        block[j] = n.op == Op::rand ? random_uniform(seed, offset, e)
                                    : random_normal(seed, offset, e);
      }
      store_span(n.dtype, block, dst + k0, m);
    }
  });
  return Value::of<float>(n.shape, std::move(out));
}

}  // namespace fusejit::ir::interp_detail
