// ir/interp_reduce: the interpreter's accumulating ops, reductions and matmul; see interp.h for
// the interpreter and interp_loops.h for the shared loops.
//
// Determinism: every output element is accumulated by one thread, in one fixed order (the
// reduced positions in row-major order; k ascending for matmul), whatever the thread count and
// whichever loop order is used for speed. Accumulation is in double (wrapping int64 for integer
// sums); NaN propagates through max and min.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/interp_loops.h"

namespace fusejit::ir::interp_detail {

namespace {

// How one reduction combines values: A is the accumulator type, init() the identity, and
// step(acc, v) folds v in.
struct SumF {
  using A = double;
  static double init() { return 0.0; }
  static double step(double acc, double v) { return acc + v; }
};
struct SumI {
  using A = int64_t;
  static int64_t init() { return 0; }
  static int64_t step(int64_t acc, int64_t v) { return wrap_add(acc, v); }
};
struct MaxF {
  using A = double;
  static double init() { return -std::numeric_limits<double>::infinity(); }
  // Once acc is NaN neither test holds, so NaN sticks.
  static double step(double acc, double v) { return (v > acc || v != v) ? v : acc; }
};
struct MinF {
  using A = double;
  static double init() { return std::numeric_limits<double>::infinity(); }
  static double step(double acc, double v) { return (v < acc || v != v) ? v : acc; }
};
struct MaxI {
  using A = int64_t;
  static int64_t init() { return std::numeric_limits<int64_t>::min(); }
  static int64_t step(int64_t acc, int64_t v) { return v > acc ? v : acc; }
};
struct MinI {
  using A = int64_t;
  static int64_t init() { return std::numeric_limits<int64_t>::max(); }
  static int64_t step(int64_t acc, int64_t v) { return v < acc ? v : acc; }
};

// What a reduction reads and writes: x's elements, the result storage, its dtype, and the
// divisor of a mean (1 otherwise).
template <class T>
struct ReduceIO {
  const T* x;
  T* out;
  DType dtype;
  int64_t divisor;
};

// Divides accumulated sums for a mean, then rounds and stores them.
template <class A, class T>
void finish(const ReduceIO<T>& io, A* acc, T* dst, int64_t count) {
  if constexpr (std::is_same_v<A, double>) {
    if (io.divisor != 1) {
      for (int64_t j = 0; j < count; ++j) acc[j] /= static_cast<double>(io.divisor);
    }
  }
  store_span(io.dtype, acc, dst, count);
}

// out[o] = fold over the reduced space of x at kept position o.
//
// Two loop orders give the same per-element order. When the kept space's innermost dimension is
// contiguous in x (e.g. reducing axis 0 of [N, M]), each thread sweeps the reduced positions
// outermost and updates a run of accumulators, reading x row by row; otherwise each output
// folds its own reduced run (e.g. reducing the last axis).
template <class P, class T>
void reduce_loop(const ReduceIO<T>& io, const Space<1>& kept, int64_t n_out, const Space<1>& red,
                 int64_t n_red) {
  using A = typename P::A;
  const int64_t ks = kept.inner_stride(0), rs = red.inner_stride(0);
  const bool outputs_inner = n_out > 1 && ks == 1;
  parallel_for(n_out, n_out * n_red, [&](int64_t ob, int64_t oe) {
    if (outputs_inner) {
      std::vector<A> acc(static_cast<size_t>(oe - ob), P::init());
      for_rows(red, 0, n_red, [&](int64_t, const std::array<int64_t, 1>& roff, int64_t rc) {
        for (int64_t r = 0; r < rc; ++r) {
          const T* row = io.x + roff[0] + r * rs;
          for_rows(kept, ob, oe, [&](int64_t o, const std::array<int64_t, 1>& koff, int64_t count) {
            const T* p = row + koff[0];
            A* a = acc.data() + (o - ob);
            for (int64_t j = 0; j < count; ++j) a[j] = P::step(a[j], static_cast<A>(p[j * ks]));
          });
        }
      });
      finish(io, acc.data(), io.out + ob, oe - ob);
      return;
    }
    A block[kBlock];
    for_rows(kept, ob, oe, [&](int64_t o, const std::array<int64_t, 1>& koff, int64_t count) {
      for (int64_t j0 = 0; j0 < count; j0 += kBlock) {
        const int64_t m = std::min(kBlock, count - j0);
        for (int64_t j = 0; j < m; ++j) {
          const T* base = io.x + koff[0] + (j0 + j) * ks;
          A acc = P::init();
          for_rows(red, 0, n_red, [&](int64_t, const std::array<int64_t, 1>& roff, int64_t rc) {
            const T* p = base + roff[0];
            for (int64_t r = 0; r < rc; ++r) acc = P::step(acc, static_cast<A>(p[r * rs]));
          });
          block[j] = acc;
        }
        finish(io, block, io.out + o + j0, m);
      }
    });
  });
}

template <class P>
Value reduce_with(const Node& n, const Value& x, const Space<1>& kept, const Space<1>& red,
                  int64_t n_red) {
  using T = std::conditional_t<std::is_same_v<typename P::A, double>, float, int64_t>;
  const int64_t n_out = numel(n.shape);
  std::shared_ptr<T[]> out = allocate<T>(n_out);
  const ReduceIO<T> io{x.data<T>(), out.get(), n.dtype, n.op == Op::mean ? n_red : 1};
  reduce_loop<P>(io, kept, n_out, red, n_red);
  return Value::of<T>(n.shape, std::move(out));
}

}  // namespace

Value eval_reduce(const Node& n, const Value& x) {
  // Split x's axes into kept and reduced ones (n.axes is sorted); each side keeps x's order.
  const std::vector<int64_t> strides = contiguous_strides(x.shape);
  Shape kept_dims, red_dims;
  std::vector<int64_t> kept_strides, red_strides;
  size_t next = 0;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    const bool reduced = next < n.axes.size() && n.axes[next] == static_cast<int64_t>(d);
    if (reduced) ++next;
    (reduced ? red_dims : kept_dims).push_back(x.shape[d]);
    (reduced ? red_strides : kept_strides).push_back(strides[d]);
  }
  const Space<1> kept = make_space<1>(kept_dims, {kept_strides});
  const Space<1> red = make_space<1>(red_dims, {red_strides});
  const int64_t n_red = numel(red_dims);

  const bool as_int = x.i != nullptr;
  switch (n.op) {
    case Op::sum:
    case Op::mean:
      return as_int ? reduce_with<SumI>(n, x, kept, red, n_red)
                    : reduce_with<SumF>(n, x, kept, red, n_red);
    case Op::max:
      return as_int ? reduce_with<MaxI>(n, x, kept, red, n_red)
                    : reduce_with<MaxF>(n, x, kept, red, n_red);
    case Op::min:
      return as_int ? reduce_with<MinI>(n, x, kept, red, n_red)
                    : reduce_with<MinF>(n, x, kept, red, n_red);
    default:
      throw InternalError(fmt::format("interpreter: eval_reduce called for {}", op_name(n.op)));
  }
}

// C[b] = A[b] @ B[b] for every batch position b of the broadcast batch dims; A[b] is M x K and
// B[b] is K x N, both row-major. The work is split into blocks of rows; within a block, columns
// and k are tiled so that a tile of B stays in cache while the block's rows use it, and each
// C[i][j] still adds its K products in order, starting from 0.
Value eval_matmul(const Node& n, const Value& a, const Value& b) {
  constexpr int64_t kRows = 64, kCols = 256, kDepth = 128;
  const int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back(), cols = n.shape.back();
  const Shape batch(n.shape.begin(), n.shape.end() - 2);
  const Shape a_batch(a.shape.begin(), a.shape.end() - 2);
  const Shape b_batch(b.shape.begin(), b.shape.end() - 2);
  // Batch strides in units of whole matrices, 0 where a batch dim is broadcast.
  std::vector<int64_t> sa = broadcast_strides(a_batch, batch),
                       sb = broadcast_strides(b_batch, batch);
  for (int64_t& s : sa) s *= m * k;
  for (int64_t& s : sb) s *= k * cols;
  const Space<2> batches = make_space<2>(batch, {sa, sb});
  const int64_t n_batch = numel(batch);
  const int64_t row_blocks = (m + kRows - 1) / kRows;

  const float* A = a.data<float>();
  const float* B = b.data<float>();
  std::shared_ptr<float[]> out = allocate<float>(numel(n.shape));
  float* C = out.get();
  const DType dt = n.dtype;

  parallel_for(n_batch * row_blocks, n_batch * m * k * cols, [&](int64_t tb, int64_t te) {
    std::vector<double> acc(static_cast<size_t>(kRows * kCols));
    for (int64_t task = tb; task < te; ++task) {
      const int64_t bi = task / row_blocks;
      const int64_t i0 = (task % row_blocks) * kRows, i1 = std::min(m, i0 + kRows);
      const std::array<int64_t, 2> off = offsets_at(batches, bi);
      const float* Ab = A + off[0];
      const float* Bb = B + off[1];
      float* Cb = C + bi * m * cols;
      for (int64_t j0 = 0; j0 < cols; j0 += kCols) {
        const int64_t jn = std::min(kCols, cols - j0);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t k0 = 0; k0 < k; k0 += kDepth) {
          const int64_t k1 = std::min(k, k0 + kDepth);
          for (int64_t i = i0; i < i1; ++i) {
            double* c = acc.data() + (i - i0) * jn;
            for (int64_t kk = k0; kk < k1; ++kk) {
              const double aik = Ab[i * k + kk];
              const float* brow = Bb + kk * cols + j0;
              for (int64_t j = 0; j < jn; ++j) c[j] += aik * static_cast<double>(brow[j]);
            }
          }
        }
        for (int64_t i = i0; i < i1; ++i) {
          store_span(dt, acc.data() + (i - i0) * jn, Cb + i * cols + j0, jn);
        }
      }
    }
  });
  return Value::of<float>(n.shape, std::move(out));
}

}  // namespace fusejit::ir::interp_detail
