// DLPack import and export (fusejit/dlpack.h), with DLManagedTensors made here the way a
// framework makes them, in the Context's memory (kDLCPU on the CPU path, kDLCUDA on a GPU).
#include <atomic>
#include <thread>

#include "fusejit/dlpack.h"
#include "fusejit/fusejit.h"
#include "support/catch.h"
#include "support/context_memory.h"
#include "support/quiet.h"

namespace fj = fusejit;
using fj::DType;
using fj::testing::ContextMemory;
using fusejit::testing::quiet;

namespace {

// A producer's tensor: owns its shape and strides; its deleter counts the calls.
struct Produced {
  DLManagedTensor managed{};
  std::vector<int64_t> shape, strides;
  std::atomic<int>* deleted = nullptr;
};

DLManagedTensor* produce(fj::Context& ctx, void* data, std::vector<int64_t> shape,
                         std::vector<int64_t> strides, DLDataType dtype,
                         std::atomic<int>* deleted) {
  auto* p = new Produced;
  p->shape = std::move(shape);
  p->strides = std::move(strides);
  p->deleted = deleted;
  DLTensor& t = p->managed.dl_tensor;
  t.data = data;
  t.device = ctx.has_gpu() ? DLDevice{kDLCUDA, ctx.device()} : DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(p->shape.size());
  t.dtype = dtype;
  t.shape = p->shape.data();
  t.strides = p->strides.empty() ? nullptr : p->strides.data();
  p->managed.manager_ctx = p;
  p->managed.deleter = [](DLManagedTensor* self) {
    auto* owner = static_cast<Produced*>(self->manager_ctx);
    ++*owner->deleted;
    delete owner;
  };
  return &p->managed;
}

constexpr DLDataType kF32{kDLFloat, 32, 1};

}  // namespace

TEST_CASE("DLPack round trip: import in place, compute, export", "[jit][dlpack]") {
  fj::Context ctx(quiet());
  ContextMemory mem(ctx, 6 * sizeof(float));
  mem.put(std::vector<float>{1, -2, 3, -4, 5, -6});
  std::atomic<int> deleted{0};
  DLManagedTensor* in = produce(ctx, mem.data(), {2, 3}, {}, kF32, &deleted);
  DLManagedTensor* out = nullptr;
  {
    const fj::Tensor x = fj::from_dlpack(ctx, in);
    CHECK(x.shape() == fj::Shape{2, 3});
    CHECK(x.data_ptr() == mem.data());  // zero-copy
    out = fj::relu(x * 2.0).to_dlpack();
  }
  ctx.synchronize();  // on the GPU a release waits for the stream's work, run by synchronize
  CHECK(deleted == 1);  // the import is released once nothing needs it
  REQUIRE(out != nullptr);
  const DLTensor& t = out->dl_tensor;
  CHECK(t.device.device_type == (ctx.has_gpu() ? kDLCUDA : kDLCPU));
  CHECK(t.ndim == 2);
  CHECK(t.shape[0] == 2);
  CHECK(t.shape[1] == 3);
  CHECK(t.strides == nullptr);
  CHECK(t.dtype.code == kDLFloat);
  CHECK(t.dtype.bits == 32);
  std::vector<float> values(6);
  fj::testing::read_context_memory(ctx, t.data, values.data(), sizeof(float) * 6);
  CHECK(values == std::vector<float>{2, 0, 6, 0, 10, 0});
  out->deleter(out);
}

TEST_CASE("DLPack import: strides, byte offset, dtypes", "[jit][dlpack]") {
  fj::Context ctx(quiet());
  ContextMemory mem(ctx, 8 * sizeof(int32_t));
  mem.put(std::vector<int32_t>{9, 9, 0, 1, 2, 3, 4, 5});
  std::atomic<int> deleted{0};
  // A transposed int32 [3,2] view of a dense [2,3] that starts 8 bytes in.
  DLManagedTensor* in = produce(ctx, mem.data(), {3, 2}, {1, 3}, {kDLInt, 32, 1}, &deleted);
  in->dl_tensor.byte_offset = 8;
  const fj::Tensor x = fj::from_dlpack(ctx, in);
  CHECK(x.dtype() == DType::i32);
  CHECK(x.to_host() == std::vector<double>{0, 3, 1, 4, 2, 5});

  ContextMemory flags(ctx, 2);
  flags.put(std::vector<uint8_t>{1, 0});
  const fj::Tensor b =
      fj::from_dlpack(ctx, produce(ctx, flags.data(), {2}, {}, {6, 8, 1}, &deleted));  // kDLBool
  CHECK(b.dtype() == DType::boolean);
  CHECK(fj::where(b, ctx.scalar(1.0), ctx.scalar(2.0)).to_host() == std::vector<double>{1, 2});
  DLManagedTensor* exported = b.to_dlpack();
  CHECK(exported->dl_tensor.dtype.code == 6);
  CHECK(exported->dl_tensor.dtype.bits == 8);
  exported->deleter(exported);
}

TEST_CASE("DLPack import of sliced tensors reads them in place", "[jit][dlpack]") {
  fj::Context ctx(quiet());
  ContextMemory mem(ctx, 24 * sizeof(float));
  std::vector<float> values(24);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  mem.put(values);
  std::atomic<int> deleted{0};

  SECTION("t[:, :, 2:5] of a [2, 2, 6] tensor: a column block, at a byte offset") {
    DLManagedTensor* m = produce(ctx, mem.data(), {2, 2, 3}, {12, 6, 1}, kF32, &deleted);
    m->dl_tensor.byte_offset = 2 * sizeof(float);
    {
      const auto t = fj::from_dlpack(ctx, m);
      CHECK(t.shape() == fj::Shape{2, 2, 3});
      CHECK(t.to_host() == std::vector<double>{2, 3, 4, 8, 9, 10, 14, 15, 16, 20, 21, 22});
    }
    ctx.eval_all();
    CHECK(deleted == 1);
  }
  SECTION("t[::2] of a [4, 6] tensor, and its transpose") {
    DLManagedTensor* m = produce(ctx, mem.data(), {2, 6}, {12, 1}, kF32, &deleted);
    CHECK(fj::from_dlpack(ctx, m).to_host() ==
          std::vector<double>{0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17});
    DLManagedTensor* mt = produce(ctx, mem.data(), {6, 2}, {1, 12}, kF32, &deleted);
    CHECK(fj::from_dlpack(ctx, mt).to_host() ==
          std::vector<double>{0, 12, 1, 13, 2, 14, 3, 15, 4, 16, 5, 17});
    ctx.eval_all();
    CHECK(deleted == 2);
  }
}

TEST_CASE("DLPack import refuses other devices and dtypes, leaving the tensor unconsumed",
          "[jit][dlpack][errors]") {
  fj::Context ctx(quiet());
  ContextMemory mem(ctx, 64);
  std::atomic<int> deleted{0};
  DLManagedTensor* m = produce(ctx, mem.data(), {4}, {}, kF32, &deleted);
  m->dl_tensor.device = ctx.has_gpu() ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, 0};
  CHECK_THROWS_WITH(fj::from_dlpack(ctx, m), ContainsSubstring("DLPack device type"));
  m->dl_tensor.device = DLDevice{kDLVulkan, 0};
  CHECK_THROWS_AS(fj::from_dlpack(ctx, m), fj::UsageError);
  m->dl_tensor.device = ctx.has_gpu() ? DLDevice{kDLCUDA, ctx.device()} : DLDevice{kDLCPU, 0};
  for (DLDataType bad : {DLDataType{kDLFloat, 64, 1}, DLDataType{kDLUInt, 8, 1},
                         DLDataType{kDLFloat, 32, 4}, DLDataType{kDLComplex, 64, 1}}) {
    m->dl_tensor.dtype = bad;
    CHECK_THROWS_WITH(fj::from_dlpack(ctx, m), ContainsSubstring("has no fusejit dtype"));
  }
  m->dl_tensor.dtype = kF32;
  const std::vector<int64_t> negative = {-1};
  m->dl_tensor.strides = const_cast<int64_t*>(negative.data());
  CHECK_THROWS_WITH(fj::from_dlpack(ctx, m), ContainsSubstring("negative"));
  CHECK_THROWS_AS(fj::from_dlpack(ctx, nullptr), fj::UsageError);
  CHECK(deleted == 0);  // never consumed: still ours
  m->deleter(m);
  CHECK(deleted == 1);
}

TEST_CASE("a DLPack export outlives its Context", "[jit][dlpack]") {
  DLManagedTensor* out = nullptr;
  std::vector<float> values(3);
  {
    fj::Context ctx(quiet());
    out = (ctx.from_vector(std::vector<double>{1, 2, 3}, {3}) + 1.0).to_dlpack();
    fj::testing::read_context_memory(ctx, out->dl_tensor.data, values.data(), sizeof(float) * 3);
  }
  CHECK(values == std::vector<float>{2, 3, 4});
  out->deleter(out);  // after the Context: must not touch it
}

TEST_CASE("DLPack import and export from 8 threads on one Context", "[jit][dlpack][threads]") {
  fj::Context ctx(quiet());
  std::atomic<int> deleted{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < 8; ++id) {
    threads.emplace_back([&, id] {
      ContextMemory mem(ctx, 4 * sizeof(float));
      for (int i = 0; i < 25; ++i) {
        const auto k = static_cast<float>(id * 1000 + i);
        mem.put(std::vector<float>{k, k, k, k});
        DLManagedTensor* out =
            (fj::from_dlpack(ctx, produce(ctx, mem.data(), {4}, {}, kF32, &deleted)) * 2.0)
                .to_dlpack();
        std::vector<float> got(4);
        fj::testing::read_context_memory(ctx, out->dl_tensor.data, got.data(), sizeof(float) * 4);
        if (got != std::vector<float>(4, 2 * k)) ++wrong;
        out->deleter(out);
      }
    });
  }
  for (auto& t : threads) t.join();
  ctx.eval_all();
  CHECK(wrong == 0);
  CHECK(deleted == 8 * 25);
}
