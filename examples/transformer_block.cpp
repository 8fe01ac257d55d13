// A llama-style transformer block written against fusejit's public API, on memory the program
// allocated itself, as a GPU program embedding fusejit would:
//
//   h   = x + Wo attention(rope(Wq rmsnorm(x)), rope(Wk rmsnorm(x)), Wv rmsnorm(x))
//   out = h + W2 (silu(W1 rmsnorm(h)) * W3 rmsnorm(h))
//
// with rotary embeddings written from slice and concat (rotate-half), causal attention from
// matmul, scale, a mask built from arange and softmax, a SwiGLU MLP and residuals. Inputs and
// weights are the program's buffers (cudaMalloc on a GPU, host memory on the CPU path), read in
// place through Context::wrap; the result is computed into the program's output buffer with
// Tensor::eval_into, on the Context's stream.
//
//   transformer_block                     on a GPU: checks a small block against the CPU
//                                         reference, then times batch 8, seq 2048, hidden 4096,
//                                         32 heads, FFN 11008 in bf16; on the CPU: a tiny block
//   transformer_block --check-only        the small check alone
//   transformer_block --batch B --seq S --hidden H --heads N --ffn F --dtype bf16|f16|f32
//                                         the timed size (bench/torch_transformer.py takes the
//                                         same flags and times the block in PyTorch)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <fusejit/fusejit.h>

namespace fj = fusejit;

namespace {

struct Config {
  int64_t batch = 8, seq = 2048, hidden = 4096, heads = 32, ffn = 11008;
  fj::DType dtype = fj::DType::bf16;
  int64_t head_dim() const { return hidden / heads; }
};

// The program's own memory: device memory on a GPU, host memory otherwise. Filled from f32
// values converted to the dtype's storage format on the host.
class Buffer {
 public:
  Buffer(fj::Context& ctx, const std::vector<float>& values, fj::DType dtype)
      : gpu_(ctx.has_gpu()), bytes_(values.size() * fj::dtype_size(dtype)) {
    std::vector<unsigned char> host(bytes_);
    for (size_t i = 0; i < values.size(); ++i) store(host.data(), i, values[i], dtype);
    if (gpu_) {
      check(cudaMalloc(&data_, bytes_), "cudaMalloc");
      check(cudaMemcpyAsync(data_, host.data(), bytes_, cudaMemcpyHostToDevice, ctx.stream()),
            "cudaMemcpyAsync");
      check(cudaStreamSynchronize(ctx.stream()), "cudaStreamSynchronize");
    } else {
      host_ = std::move(host);
      data_ = host_.data();
    }
  }
  ~Buffer() {
    if (gpu_) cudaFree(data_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

  // The values as f32, copied back (after the Context's stream has finished).
  std::vector<float> read(fj::Context& ctx, fj::DType dtype) const {
    std::vector<unsigned char> host(bytes_);
    if (gpu_) {
      ctx.synchronize();
      check(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy");
    } else {
      std::memcpy(host.data(), data_, bytes_);
    }
    std::vector<float> values(bytes_ / fj::dtype_size(dtype));
    for (size_t i = 0; i < values.size(); ++i) values[i] = load(host.data(), i, dtype);
    return values;
  }

 private:
  static void check(cudaError_t status, const char* call) {
    if (status != cudaSuccess) {
      throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(status));
    }
  }
  static void store(unsigned char* p, size_t i, float v, fj::DType dtype) {
    if (dtype == fj::DType::bf16) {
      __nv_bfloat16 b = __float2bfloat16(v);
      std::memcpy(p + 2 * i, &b, 2);
    } else if (dtype == fj::DType::f16) {
      __half h = __float2half(v);
      std::memcpy(p + 2 * i, &h, 2);
    } else {
      std::memcpy(p + 4 * i, &v, 4);
    }
  }
  static float load(const unsigned char* p, size_t i, fj::DType dtype) {
    if (dtype == fj::DType::bf16) {
      __nv_bfloat16 b;
      std::memcpy(&b, p + 2 * i, 2);
      return __bfloat162float(b);
    }
    if (dtype == fj::DType::f16) {
      __half h;
      std::memcpy(&h, p + 2 * i, 2);
      return __half2float(h);
    }
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }

  bool gpu_;
  size_t bytes_;
  void* data_ = nullptr;
  std::vector<unsigned char> host_;
};

// The block's parameters and input, in the program's buffers.
struct Weights {
  Weights(fj::Context& ctx, const Config& c) {
    std::mt19937 rng(2026);
    auto random = [&](int64_t rows, int64_t cols) {
      std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(float(cols)));
      std::vector<float> v(rows * cols);
      for (float& e : v) e = normal(rng);
      return std::make_unique<Buffer>(ctx, v, c.dtype);
    };
    x = random(c.batch * c.seq, c.hidden);
    attn_norm = std::make_unique<Buffer>(ctx, std::vector<float>(c.hidden, 1.0f), c.dtype);
    mlp_norm = std::make_unique<Buffer>(ctx, std::vector<float>(c.hidden, 1.0f), c.dtype);
    wq = random(c.hidden, c.hidden);
    wk = random(c.hidden, c.hidden);
    wv = random(c.hidden, c.hidden);
    wo = random(c.hidden, c.hidden);
    w1 = random(c.ffn, c.hidden);
    w3 = random(c.ffn, c.hidden);
    w2 = random(c.hidden, c.ffn);
    // The rotary tables [seq, head_dim]: angle p * 10000^(-2i/d), repeated over both halves.
    const int64_t d = c.head_dim();
    std::vector<float> cos_v(c.seq * d), sin_v(c.seq * d);
    for (int64_t p = 0; p < c.seq; ++p) {
      for (int64_t i = 0; i < d; ++i) {
        const double angle = p * std::pow(10000.0, -2.0 * double(i % (d / 2)) / double(d));
        cos_v[p * d + i] = float(std::cos(angle));
        sin_v[p * d + i] = float(std::sin(angle));
      }
    }
    cos = std::make_unique<Buffer>(ctx, cos_v, c.dtype);
    sin = std::make_unique<Buffer>(ctx, sin_v, c.dtype);
  }
  std::unique_ptr<Buffer> x, attn_norm, mlp_norm, wq, wk, wv, wo, w1, w3, w2, cos, sin;
};

// rotate-half rotary embedding of t [batch, heads, seq, head_dim].
fj::Tensor rope(const fj::Tensor& t, const fj::Tensor& cos, const fj::Tensor& sin) {
  const int64_t d = t.shape().back();
  fj::Tensor first = fj::slice(t, -1, 0, d / 2);
  fj::Tensor second = fj::slice(t, -1, d / 2, d);
  return t * cos + fj::concat({-second, first}, -1) * sin;
}

// The block, recorded (nothing runs until its result is needed).
fj::Tensor block(fj::Context& ctx, const Config& c, const Weights& w) {
  auto in = [&](const Buffer& b, fj::Shape shape) { return ctx.wrap(b.data(), shape, c.dtype); };
  const int64_t b = c.batch, s = c.seq, h = c.hidden, n = c.heads, d = c.head_dim();
  fj::Tensor x = in(*w.x, {b, s, h});
  const fj::Tensor cos = in(*w.cos, {s, d});
  const fj::Tensor sin = in(*w.sin, {s, d});
  auto heads = [&](const fj::Tensor& t) {
    return fj::transpose(fj::reshape(t, {b, s, n, d}), 1, 2);
  };

  fj::Tensor xn = fj::rms_norm(x, in(*w.attn_norm, {h}), 1e-6);
  fj::Tensor q = rope(heads(fj::linear(xn, in(*w.wq, {h, h}))), cos, sin);
  fj::Tensor k = rope(heads(fj::linear(xn, in(*w.wk, {h, h}))), cos, sin);
  fj::Tensor v = heads(fj::linear(xn, in(*w.wv, {h, h})));

  fj::Tensor scores = fj::matmul(q, fj::transpose(k, -1, -2)) * (1.0 / std::sqrt(double(d)));
  fj::Tensor pos = ctx.arange(0, double(s), 1, fj::DType::i32);
  fj::Tensor future = fj::gt(fj::reshape(pos, {1, s}), fj::reshape(pos, {s, 1}));
  scores = fj::where(future, ctx.scalar(-INFINITY, c.dtype), scores);
  fj::Tensor attn = fj::matmul(fj::softmax(scores, -1), v);
  attn = fj::reshape(fj::transpose(attn, 1, 2), {b, s, h});
  fj::Tensor hres = x + fj::linear(attn, in(*w.wo, {h, h}));

  fj::Tensor hn = fj::rms_norm(hres, in(*w.mlp_norm, {h}), 1e-6);
  fj::Tensor gate = fj::linear(hn, in(*w.w1, {c.ffn, h}));
  fj::Tensor up = fj::linear(hn, in(*w.w3, {c.ffn, h}));
  return hres + fj::linear(fj::silu(gate) * up, in(*w.w2, {h, c.ffn}));
}

std::string describe(const Config& c) {
  char text[160];
  std::snprintf(text, sizeof text, "batch %lld, seq %lld, hidden %lld, %lld heads, ffn %lld, %s",
                (long long)c.batch, (long long)c.seq, (long long)c.hidden, (long long)c.heads,
                (long long)c.ffn, std::string(fj::dtype_name(c.dtype)).c_str());
  return text;
}

void print_plan(const fj::PlanSummary& plan) {
  std::printf("  plan: %d generated kernels + %d cuBLASLt calls\n", plan.kernels,
              plan.library_calls);
  for (const std::string& region : plan.regions) std::printf("    %s\n", region.c_str());
}

// Builds the block at `c`, computes it into the program's output buffer, returns a checksum.
double run_into_buffer(fj::Context& ctx, const Config& c, fj::Tensor out) {
  Buffer result(ctx, std::vector<float>(out.numel(), 0.0f), c.dtype);
  out.eval_into(result.data(), result.bytes());
  double checksum = 0.0;
  for (float v : result.read(ctx, c.dtype)) checksum += v;
  return checksum;
}

// The small block on the GPU against the CPU reference (outputs poisoned first). In f32 the
// whole block must meet fusejit's f32 bound; in bf16 every one of its 16 regions rounds what
// it stores, so the error of the block is printed for information (one region's bound is 1e-2).
bool check_small(fj::Context& ctx) {
  bool ok = true;
  for (fj::DType dtype : {fj::DType::f32, fj::DType::bf16}) {
    Config c{2, 128, 512, 8, 1376, dtype};
    Weights w(ctx, c);
    fj::Tensor out = block(ctx, c, w);
    fj::ReferenceCheck check = fj::check_against_reference({out});
    const bool judged = dtype == fj::DType::f32;
    std::printf("check (%s): error %.3g over %s: %s\n", describe(c).c_str(), check.error,
                check.scope.c_str(),
                !judged ? "(information)" : check.passed() ? "pass" : "FAIL");
    std::printf("  checksum of the result written into the program's buffer: %.6g\n",
                run_into_buffer(ctx, c, out));
    if (judged) ok = ok && check.passed();
  }
  return ok;
}

void time_block(fj::Context& ctx, const Config& c) {
  Weights w(ctx, c);
  fj::Tensor out = block(ctx, c, w);
  print_plan(fj::plan_summary({out}));
  fj::TraceTiming t = fj::time_trace({out}, 10, 3);
  std::printf("TIME transformer_block %lld %lld %lld %lld %lld %s fusejit_ms=%.3f tflops=%.1f\n",
              (long long)c.batch, (long long)c.seq, (long long)c.hidden, (long long)c.heads,
              (long long)c.ffn, std::string(fj::dtype_name(c.dtype)).c_str(), t.ms,
              t.flops / (t.ms * 1e-3) / 1e12);
  std::printf("  checksum: %.6g\n", run_into_buffer(ctx, c, out));
}

bool parse(int argc, char** argv, Config& c, bool& check_only) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--check-only") {
      check_only = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    if (a == "--batch") c.batch = std::stoll(v);
    else if (a == "--seq") c.seq = std::stoll(v);
    else if (a == "--hidden") c.hidden = std::stoll(v);
    else if (a == "--heads") c.heads = std::stoll(v);
    else if (a == "--ffn") c.ffn = std::stoll(v);
    else if (a == "--dtype") c.dtype = v == "f32" ? fj::DType::f32 : v == "f16" ? fj::DType::f16
                                     : v == "bf16" ? fj::DType::bf16 : throw std::invalid_argument(v);
    else return false;
  }
  return c.heads > 0 && c.hidden % c.heads == 0 && c.head_dim() % 2 == 0;
}

}  // namespace

int main(int argc, char** argv) try {
  Config c;
  bool check_only = false;
  if (!parse(argc, argv, c, check_only)) {
    std::fprintf(stderr,
                 "usage: transformer_block [--check-only] [--batch B] [--seq S] [--hidden H] "
                 "[--heads N] [--ffn F] [--dtype bf16|f16|f32]\n"
                 "(hidden must split into heads of an even head size)\n");
    return 2;
  }
  fj::Context ctx;
  if (!ctx.has_gpu()) {
    Config tiny{1, 16, 64, 4, 172, fj::DType::f32};
    std::printf("no GPU: the CPU reference computes a tiny block (%s)\n", describe(tiny).c_str());
    Weights w(ctx, tiny);
    fj::Tensor out = block(ctx, tiny, w);
    std::printf("on a GPU this block would run as:\n");
    print_plan(fj::plan_summary({out}));
    std::printf("checksum: %.6g\n", run_into_buffer(ctx, tiny, out));
    std::printf("(FUSEJIT_DUMP=plan,cuda shows the plan and kernels; `fusejit plan` reads a "
                "trace written with Context::trace_text)\n");
    return 0;
  }
  const bool ok = check_small(ctx);
  if (!check_only) time_block(ctx, c);
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "transformer_block: %s\n", e.what());
  return 1;
}
