// Text generation with a Llama-architecture decoder written against fusejit's public API:
// prefill of the prompt, then one decode step per token with a KV cache written in place
// (update_slice at the position each step reads as data), greedy or sampled on the GPU.
//
//   generate --help                       the flags: the shape (--config tiny or llama3-8b, and
//                                         each dimension), the run (--batch, --prompt,
//                                         --new-tokens), sampling (--temperature, --top-k,
//                                         --top-p, --seed), the weights (random on the device,
//                                         --weights FILE, --save-weights FILE, --int8), --check
//                                         and --no-replay
//
// The engine's options: the environment's FUSEJIT_* variables, and where it does not name them,
// three that a decode loop wants and the library leaves off by default: programmatic dependent
// launch (FUSEJIT_PDL=all) and the skinny-GEMM kernel's ring of weights (FUSEJIT_GEMV_RING=1),
// with which each one-row GEMM copies its first weights while the kernel ahead of it still runs
// (on an H100 they make the 8B decode step at batch 1 6.1% faster, 4.8% with int8 weights, and
// batch 8 0.7% slower: bench/RESULTS.md, "Skinny GEMMs"), and the skinny-GEMM kernel's epilogue
// regions (FUSEJIT_GEMV_EPILOGUE=1: silu(gate) * up computed where the gate/up projection stores;
// on an H100 1.2% faster at batch 1, 2.4% with int8 weights). FUSEJIT_PDL=0 FUSEJIT_GEMV_RING=0
// FUSEJIT_GEMV_EPILOGUE=0 gives the library's defaults. The report's first line says which are in
// force.
//
// The decode step is recorded once and replayed (fusejit::Replay): on a GPU each token costs one
// CUDA graph launch. The step reads its token, position and random key from device buffers that
// it writes itself for the next run, with its KV cache writes (update_slice).
// The decode trace is the same at every step (the position is an input's value), so it is
// planned and compiled once. Random weights (--random-weights, the default) are drawn by
// fusejit's Philox generator inside the kernel that stores them, nothing downloaded; loaded ones
// are mapped from the files (safetensors.h) and copied into the Context's memory.
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fusejit/fusejit.h>

#include "llama_reference.h"
#include "safetensors.h"

namespace fj = fusejit;

namespace {

struct Config {
  std::string name = "llama3-8b";
  int64_t layers = 32, hidden = 4096, heads = 32, kv_heads = 8, ffn = 14336, vocab = 128256;
  double rope_base = 500000.0;
  int64_t head_dim() const { return hidden / heads; }
};

// Weights of the model, embedding and lm_head included.
double parameters(const Config& c) {
  const double kv = double(c.kv_heads * c.head_dim());
  const double layer = double(c.hidden) * (2.0 * double(c.hidden) + 2.0 * kv + 3.0 * double(c.ffn));
  return double(c.layers) * layer + 2.0 * double(c.vocab) * double(c.hidden);
}

// --check's double-precision reference (llama_reference.h) is plain loops on the host: it runs
// for models up to this size. Its bound on each step's logits: bf16 storage rounds every value
// the model computes (about 0.4% each), and the errors of two layers' worth of ops add up.
constexpr double kReferenceMaxParameters = 50e6;
constexpr double kReferenceBound = 3e-2;

Config tiny() {
  Config c;
  c.name = "tiny";
  c.layers = 2;
  c.hidden = 256;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 512;
  c.vocab = 1000;
  c.rope_base = 10000.0;
  return c;
}

struct Run {
  int64_t batch = 1, prompt = 128, new_tokens = 256;
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: no top-k filter
  double top_p = 1.0;        // 1: no top-p filter
  uint64_t seed = 2026;
  bool check = false;
  bool int8 = false;                  // --int8: quantize the projections
  bool replay = true;                 // --no-replay: record and evaluate every decode step
  std::string weights, save_weights;  // --weights, --save-weights (empty: none)
  int64_t capacity() const { return prompt + new_tokens; }
};

// A projection's weights, [out, in] as fj::linear takes them: bf16, or (--int8, or an int8
// checkpoint) i8 with a bf16 scale per output row, the weight being q * scale[row].
struct Proj {
  fj::Tensor w;      // bf16, or i8
  fj::Tensor scale;  // [out] bf16 with i8 weights; empty otherwise
  bool int8() const { return scale.defined(); }
};

struct Layer {
  // q, k and v stacked by rows into one weight, and gate and up into another: one GEMM each (as
  // gpt-fast's wqkv), fewer launches per layer.
  fj::Tensor attn_norm, ffn_norm;
  Proj wqkv, wo, w13, w2;
  fj::Tensor k_cache, v_cache;  // [batch, kv_heads, capacity, head_dim], written in place
};

struct Model {
  Config c;
  fj::Tensor embed, final_norm;
  Proj lm_head;
  fj::Tensor cos, sin;  // [capacity, head_dim], f32: the rotary angles of every position
  std::vector<Layer> layers;
};

constexpr fj::DType kDtype = fj::DType::bf16;

// A [rows, cols] weight of standard deviation 1/sqrt(cols), drawn and stored by one kernel.
fj::Tensor random_weight(fj::Context& ctx, int64_t rows, int64_t cols, uint64_t seed,
                         uint64_t& stream) {
  fj::Tensor w =
      fj::cast(ctx.randn({rows, cols}, seed, stream++) * (1.0 / std::sqrt(double(cols))), kDtype);
  return w.eval();
}

// Weights stacked by rows (the first dimension), in order.
fj::Tensor stacked(const std::vector<fj::Tensor>& parts) {
  return parts.size() == 1 ? parts[0] : fj::concat(parts, 0).eval();
}

// Weight-only int8, per output row: scale = max |w| / 127, rounded to bf16; q = w / scale
// rounded to the nearest integer (ties away from zero) within [-127, 127]. A row of zeros gets
// scale 0 (and q of 0 or 127: q * 0 is 0 either way).
Proj quantized(const fj::Tensor& w) {
  const fj::Tensor wf = fj::cast(w, fj::DType::f32);
  const fj::Tensor scale = fj::cast(fj::max(fj::abs(wf), {1}, true) * (1.0 / 127.0), kDtype);
  const fj::Tensor x = fj::clamp(wf / fj::cast(scale, fj::DType::f32), -127.0, 127.0);
  fj::Tensor q =
      fj::cast(fj::where(fj::ge(x, w.context().scalar(0.0)), x + 0.5, x - 0.5), fj::DType::i8);
  return {q.eval(), fj::reshape(scale, {w.shape()[0]}).eval()};
}

// The projections quantized (their bf16 weights let go).
void quantize(const std::vector<Proj*>& projs) {
  for (Proj* p : projs) {
    if (!p->int8()) *p = quantized(p->w);
  }
}

// x @ w^T. With int8 weights: the matmul of the weights cast to bf16, scaled per output column,
// which fusejit runs as one skinny-GEMM kernel reading the int8 bytes where x has at most 16
// rows (a decode step), and as a cast kernel and cuBLASLt elsewhere (the prefill).
fj::Tensor project(const fj::Tensor& x, const Proj& p) {
  if (!p.int8()) return fj::linear(x, p.w);
  return fj::linear(x, fj::cast(p.w, kDtype)) * p.scale;
}

// Bytes of a projection's weights and scales.
double bytes_of(const Proj& p) {
  double b = double(p.w.numel()) * fj::dtype_size(p.w.dtype());
  if (p.int8()) b += double(p.scale.numel()) * fj::dtype_size(p.scale.dtype());
  return b;
}

// Every projection of the model, lm_head included.
std::vector<Proj*> projections(Model& m) {
  std::vector<Proj*> out = {&m.lm_head};
  for (Layer& y : m.layers) out.insert(out.end(), {&y.wqkv, &y.wo, &y.w13, &y.w2});
  return out;
}

// Rotary tables: position p, dim i of head_dim d: angle p * base^(-2 (i mod d/2) / d).
void rotary_tables(fj::Context& ctx, Model& m, int64_t capacity) {
  const int64_t d = m.c.head_dim();
  std::vector<double> inv(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) {
    inv[static_cast<size_t>(i)] = std::pow(m.c.rope_base, -2.0 * double(i % (d / 2)) / double(d));
  }
  const fj::Tensor pos = fj::reshape(ctx.arange(0, double(capacity), 1), {capacity, 1});
  const fj::Tensor angle = pos * ctx.from_vector(inv, {1, d});
  m.cos = fj::cos(angle).eval();
  m.sin = fj::sin(angle).eval();
}

Model random_model(fj::Context& ctx, const Config& c, const Run& r) {
  Model m;
  m.c = c;
  uint64_t stream = 0;
  const int64_t h = c.hidden, kv = c.kv_heads * c.head_dim();
  m.embed = random_weight(ctx, c.vocab, h, r.seed, stream);
  m.final_norm = ctx.ones({h}, kDtype).eval();
  m.lm_head.w = random_weight(ctx, c.vocab, h, r.seed, stream);
  for (int64_t l = 0; l < c.layers; ++l) {
    Layer y;
    y.attn_norm = ctx.ones({h}, kDtype).eval();
    y.ffn_norm = ctx.ones({h}, kDtype).eval();
    y.wqkv.w = stacked({random_weight(ctx, h, h, r.seed, stream),
                        random_weight(ctx, kv, h, r.seed, stream),
                        random_weight(ctx, kv, h, r.seed, stream)});
    y.wo.w = random_weight(ctx, h, h, r.seed, stream);
    y.w13.w = stacked({random_weight(ctx, c.ffn, h, r.seed, stream),
                       random_weight(ctx, c.ffn, h, r.seed, stream)});
    y.w2.w = random_weight(ctx, h, c.ffn, r.seed, stream);
    if (r.int8) quantize({&y.wqkv, &y.wo, &y.w13, &y.w2});  // one layer's bf16 at a time
    m.layers.push_back(std::move(y));
  }
  if (r.int8) quantize({&m.lm_head});
  rotary_tables(ctx, m, r.capacity());
  return m;
}

// Checkpoints in Hugging Face's names (model.embed_tokens.weight, model.layers.N.self_attn.
// q_proj.weight, ...): each weight of the Model, where it is kept, and the shape the config gives
// it. Projections are [out, in], as fj::linear takes them. On rope: Meta's original checkpoints
// rotate interleaved pairs (x0, x1), (x2, x3), ... of each head; Hugging Face's conversion
// permutes the rows of q_proj and k_proj so that rotate-half (the first half of each head against
// the second) computes the same thing. `rope` above is rotate-half, so HF's q/k weights are used
// as they are; a Meta-format checkpoint would need that permutation first.
// An int8 projection is an I8 "<name>.weight" and its "<name>.scales" ([out], bf16 or f32).
struct NamedWeight {
  std::string name;
  fj::Tensor* slot;  // the Model's weight holding it
  fj::Shape shape;   // its shape in the checkpoint
  int64_t row = 0;   // its first row in *slot (q, k and v share one, gate and up another)
  fj::Tensor* scale = nullptr;  // a projection's: where the scales of int8 weights go
};

// "model.layers.0.mlp.down_proj.scales" for "model.layers.0.mlp.down_proj.weight".
std::string scales_name(const std::string& weight) {
  return weight.substr(0, weight.rfind(".weight")) + ".scales";
}

std::vector<NamedWeight> named_weights(Model& m) {
  const Config& c = m.c;
  const int64_t h = c.hidden, kv = c.kv_heads * c.head_dim();
  const auto proj = [](std::string name, Proj& p, fj::Shape shape, int64_t row = 0) {
    return NamedWeight{std::move(name), &p.w, std::move(shape), row, &p.scale};
  };
  std::vector<NamedWeight> out = {{"model.embed_tokens.weight", &m.embed, {c.vocab, h}},
                                  {"model.norm.weight", &m.final_norm, {h}},
                                  proj("lm_head.weight", m.lm_head, {c.vocab, h})};
  for (size_t l = 0; l < m.layers.size(); ++l) {
    Layer& y = m.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "input_layernorm.weight", &y.attn_norm, {h}});
    out.push_back(proj(p + "self_attn.q_proj.weight", y.wqkv, {h, h}, 0));
    out.push_back(proj(p + "self_attn.k_proj.weight", y.wqkv, {kv, h}, h));
    out.push_back(proj(p + "self_attn.v_proj.weight", y.wqkv, {kv, h}, h + kv));
    out.push_back(proj(p + "self_attn.o_proj.weight", y.wo, {h, h}));
    out.push_back({p + "post_attention_layernorm.weight", &y.ffn_norm, {h}});
    out.push_back(proj(p + "mlp.gate_proj.weight", y.w13, {c.ffn, h}, 0));
    out.push_back(proj(p + "mlp.up_proj.weight", y.w13, {c.ffn, h}, c.ffn));
    out.push_back(proj(p + "mlp.down_proj.weight", y.w2, {h, c.ffn}));
  }
  return out;
}

// One weight from the file, its shape checked against the config, as bf16. A checkpoint with
// tied embeddings (Llama 3.2 1B and 3B) has no lm_head.weight: the embedding serves as both.
fj::Tensor load_weight(fj::Context& ctx, const safetensors::Weights& file, const NamedWeight& w) {
  const bool tied = w.name == "lm_head.weight" && !file.contains(w.name);
  const std::string name = tied ? "model.embed_tokens.weight" : w.name;
  if (!file.contains(name)) {
    throw fj::UsageError(file.path() + " has no tensor " + name +
                         ": --weights takes a Llama checkpoint in Hugging Face's names, with as "
                         "many layers as --layers says");
  }
  const safetensors::TensorInfo& info = file.info(name);
  if (info.shape != w.shape) {
    throw fj::UsageError("tensor " + name + " of " + file.path() + " has shape " +
                         safetensors::shape_text(info.shape) + " where the config wants " +
                         safetensors::shape_text(w.shape) +
                         ": pass the shape flags of the checkpoint's config.json (--hidden, "
                         "--heads, --kv-heads, --ffn, --vocab)");
  }
  const bool int8 = info.dtype == fj::DType::i8;
  if (info.dtype && !fj::is_floating(*info.dtype) && !(int8 && w.scale)) {
    throw fj::UsageError("tensor " + name + " of " + file.path() + " is " + info.dtype_name +
                         (int8 ? ", int8, but not a projection (only projections are int8)"
                               : ", not a float dtype: it is not a weight"));
  }
  const fj::Tensor t = file.load(ctx, name);
  if (int8) return t;
  return t.dtype() == kDtype ? t : fj::cast(t, kDtype).eval();
}

// The scales [rows] of int8 weights `name`, as bf16.
fj::Tensor load_scales(fj::Context& ctx, const safetensors::Weights& file, const std::string& name,
                       int64_t rows) {
  const std::string s = scales_name(name);
  if (!file.contains(s)) {
    throw fj::UsageError("tensor " + name + " of " + file.path() + " is int8 but the file has no " +
                         s + ": int8 weights need their scales, one per output row");
  }
  const safetensors::TensorInfo& info = file.info(s);
  if (info.shape != fj::Shape{rows} || !info.dtype || !fj::is_floating(*info.dtype)) {
    throw fj::UsageError("tensor " + s + " of " + file.path() + " is " + info.dtype_name +
                         safetensors::shape_text(info.shape) + " where the scales of " + name +
                         " are a float vector [" + std::to_string(rows) + "]");
  }
  const fj::Tensor t = file.load(ctx, s);
  return t.dtype() == kDtype ? t : fj::cast(t, kDtype).eval();
}

Model loaded_model(fj::Context& ctx, const Config& c, const Run& r) {
  const safetensors::Weights file(r.weights);
  Model m;
  m.c = c;
  m.layers.resize(static_cast<size_t>(c.layers));
  const std::vector<NamedWeight> named = named_weights(m);
  std::map<fj::Tensor*, std::vector<fj::Tensor>> parts;  // per slot, in row order
  size_t scales = 0;                                     // int8 weights' scales loaded
  for (const NamedWeight& w : named) {
    parts[w.slot].push_back(load_weight(ctx, file, w));
    if (parts[w.slot].back().dtype() != fj::DType::i8) continue;
    ++scales;
    const bool tied = w.name == "lm_head.weight" && !file.contains(w.name);
    parts[w.scale].push_back(
        load_scales(ctx, file, tied ? "model.embed_tokens.weight" : w.name, w.shape[0]));
  }
  for (auto& [slot, loaded] : parts) {
    for (const fj::Tensor& t : loaded) {
      if (t.dtype() != loaded[0].dtype()) {
        throw fj::UsageError(r.weights +
                             ": the parts of one stacked weight (q, k and v; gate "
                             "and up) must be all int8 or all float");
      }
    }
    *slot = stacked(loaded);
  }
  const bool tied = !file.contains("lm_head.weight");
  const size_t used = named.size() - (tied ? 1 : 0) + scales - (tied && scales > 0 ? 1 : 0);
  const size_t extra = file.names().size() - used;
  std::printf("weights: %zu tensors from %s%s%s\n", used, r.weights.c_str(),
              tied ? " (lm_head tied to the embedding)" : "",
              scales > 0 ? " (projections int8, with their scales)" : "");
  if (extra > 0) {
    std::printf("weights: %zu tensors of the file unused (a deeper model than --layers?)\n", extra);
  }
  if (r.int8) quantize(projections(m));
  rotary_tables(ctx, m, r.capacity());
  return m;
}

// Rows row .. row + shape[0] of a downloaded weight ([rows, cols], or the [rows] scales of int8
// weights), as a tensor of `shape`.
safetensors::HostTensor rows_of(const safetensors::HostTensor& t, int64_t row,
                                const fj::Shape& shape) {
  if (t.shape.empty() || shape == t.shape) return t;
  size_t row_bytes = fj::dtype_size(t.dtype);
  for (size_t i = 1; i < t.shape.size(); ++i) row_bytes *= static_cast<size_t>(t.shape[i]);
  const auto from = t.bytes.begin() + static_cast<std::ptrdiff_t>(size_t(row) * row_bytes);
  return {t.dtype, shape,
          std::vector<unsigned char>(
              from, from + static_cast<std::ptrdiff_t>(size_t(shape[0]) * row_bytes))};
}

// The model's weights, downloaded, in one file (metadata "format": "pt", which Hugging Face's
// loaders look for).
void save_weights(Model& m, const std::string& path) {
  std::map<std::string, safetensors::HostTensor> tensors;
  std::map<const fj::Tensor*, safetensors::HostTensor> whole;  // each slot downloaded once
  for (const NamedWeight& w : named_weights(m)) {
    if (!whole.contains(w.slot)) whole[w.slot] = safetensors::download(*w.slot);
    tensors[w.name] = rows_of(whole[w.slot], w.row, w.shape);
    if (!w.scale || !w.scale->defined()) continue;
    if (!whole.contains(w.scale)) whole[w.scale] = safetensors::download(*w.scale);
    tensors[scales_name(w.name)] = rows_of(whole[w.scale], w.row, {w.shape[0]});
  }
  safetensors::write(path, tensors, {{"format", "pt"}});
  std::printf("weights: %zu tensors saved to %s\n", tensors.size(), path.c_str());
}

// Fresh caches (zeros) for a run of `batch` sequences.
void empty_caches(fj::Context& ctx, Model& m, int64_t batch, int64_t capacity) {
  const fj::Shape shape{batch, m.c.kv_heads, capacity, m.c.head_dim()};
  for (Layer& y : m.layers) {
    y.k_cache = ctx.zeros(shape, kDtype).eval();
    y.v_cache = ctx.zeros(shape, kDtype).eval();
  }
}

// rotate-half rotary embedding of t [batch, heads, n, head_dim] at the rows' angles [n, d].
fj::Tensor rope(const fj::Tensor& t, const fj::Tensor& cos, const fj::Tensor& sin) {
  const int64_t d = t.shape().back();
  const fj::Tensor first = fj::slice(t, -1, 0, d / 2);
  const fj::Tensor second = fj::slice(t, -1, d / 2, d);
  const fj::Tensor turned = fj::concat({-second, first}, -1);
  return fj::cast(fj::cast(t, fj::DType::f32) * cos + fj::cast(turned, fj::DType::f32) * sin,
                  kDtype);
}

// What a step's tokens see: their positions, the rotary angles there, and which keys each query
// row may read (those at or before its position).
//   A decode step (its start is data): the whole cache, rows group-major; `future` is
//   [group * n, capacity], true where the key comes after the query.
//   Tokens from position 0 (a prefill, or --check's rerun; `from_start`): the step's own keys
//   and values, not the cache; `future` is [n, n], key > query of two aranges, which the fused
//   attention takes as a causal mask (cuDNN's where it is found, and tiles above the diagonal
//   skipped), where a boolean tensor over the whole cache would be read as it is.
struct Positions {
  fj::Tensor cos, sin;  // [n, head_dim]
  fj::Tensor future;
  bool from_start = false;
};

Positions positions(fj::Context& ctx, const Model& m, const fj::Tensor& start, int64_t n,
                    int64_t capacity, bool from_start) {
  const int64_t group = m.c.heads / m.c.kv_heads;
  const fj::Tensor at = fj::reshape(start, {1}) + ctx.arange(0, double(n), 1, fj::DType::i32);
  Positions p;
  p.cos = fj::index_select(m.cos, 0, at);
  p.sin = fj::index_select(m.sin, 0, at);
  p.from_start = from_start;
  if (from_start) {
    const fj::Tensor rows = ctx.arange(0, double(n), 1, fj::DType::i32);
    p.future = fj::gt(fj::reshape(rows, {1, n}), fj::reshape(rows, {n, 1}));
    return p;
  }
  const fj::Tensor query =
      fj::reshape(fj::expand(fj::reshape(at, {1, n}), {group, n}), {group * n, 1});
  const fj::Tensor key =
      fj::reshape(ctx.arange(0, double(capacity), 1, fj::DType::i32), {1, capacity});
  p.future = fj::gt(key, query);
  return p;
}

// softmax(q kᵀ / sqrt(d), -inf where `future`) v over [..., rows, d] and [..., keys, d]: the
// pattern the fused attention recognizes.
fj::Tensor masked_attention(fj::Context& ctx, const fj::Tensor& q, const fj::Tensor& k,
                            const fj::Tensor& v, const fj::Tensor& future) {
  const double d = double(q.shape().back());
  fj::Tensor scores = fj::matmul(q, fj::transpose(k, 2, 3)) * (1.0 / std::sqrt(d));
  scores = fj::where(future, ctx.scalar(-INFINITY, kDtype), scores);
  return fj::matmul(fj::softmax(scores, -1), v);
}

// Attention of the step's queries q [b, heads, n, d] over the step's own keys and values k, v
// [b, kv_heads, n, d] (tokens from position 0): each KV head broadcast over its group of query
// heads, causal.
fj::Tensor attention_from_start(fj::Context& ctx, const Model& m, const fj::Tensor& q,
                                const fj::Tensor& k, const fj::Tensor& v, const Positions& p) {
  const int64_t b = q.shape()[0], n = q.shape()[2], d = m.c.head_dim(), kv = m.c.kv_heads;
  const int64_t group = m.c.heads / kv;
  const auto grouped = [&](const fj::Tensor& t) {
    return fj::reshape(fj::expand(fj::reshape(t, {b, kv, 1, n, d}), {b, kv, group, n, d}),
                       {b, m.c.heads, n, d});
  };
  const fj::Tensor out = masked_attention(ctx, q, grouped(k), grouped(v), p.future);
  return fj::reshape(fj::transpose(out, 1, 2), {b, n, m.c.hidden});  // out: [b, heads, n, d]
}

// Attention of the step's queries q [b, heads, n, d] over the layer's whole cache, grouped:
// the `group` query heads of one KV head are rows of one matmul against that head's cache.
fj::Tensor attention(fj::Context& ctx, const Model& m, Layer& y, const fj::Tensor& q,
                     const Positions& p) {
  const int64_t b = q.shape()[0], n = q.shape()[2], d = m.c.head_dim(), kv = m.c.kv_heads;
  const int64_t group = m.c.heads / kv;
  const fj::Tensor rows = fj::reshape(q, {b, kv, group * n, d});
  const fj::Tensor out =  // [b, kv, g*n, d]
      masked_attention(ctx, rows, y.k_cache, y.v_cache, p.future);
  return fj::reshape(fj::transpose(fj::reshape(out, {b, m.c.heads, n, d}), 1, 2),
                     {b, n, m.c.hidden});
}

// One decoder layer over x [b, n, hidden]; writes the step's keys and values at `start`.
fj::Tensor layer(fj::Context& ctx, const Model& m, Layer& y, const fj::Tensor& x,
                 const fj::Tensor& start, const Positions& p) {
  const int64_t b = x.shape()[0], n = x.shape()[1], d = m.c.head_dim();
  auto heads = [&](const fj::Tensor& t, int64_t count) {
    return fj::transpose(fj::reshape(t, {b, n, count, d}), 1, 2);
  };
  const int64_t hd = m.c.hidden, kv = m.c.kv_heads * d, f = m.c.ffn;
  const fj::Tensor qkv = project(fj::rms_norm(x, y.attn_norm, 1e-5), y.wqkv);
  const fj::Tensor q = rope(heads(fj::slice(qkv, -1, 0, hd), m.c.heads), p.cos, p.sin);
  const fj::Tensor k = rope(heads(fj::slice(qkv, -1, hd, hd + kv), m.c.kv_heads), p.cos, p.sin);
  fj::update_slice(y.k_cache, 2, start, k);
  const fj::Tensor v = heads(fj::slice(qkv, -1, hd + kv, hd + 2 * kv), m.c.kv_heads);
  fj::update_slice(y.v_cache, 2, start, v);
  const fj::Tensor att =
      p.from_start ? attention_from_start(ctx, m, q, k, v, p) : attention(ctx, m, y, q, p);
  const fj::Tensor h = x + project(att, y.wo);
  const fj::Tensor gate_up = project(fj::rms_norm(h, y.ffn_norm, 1e-5), y.w13);
  return h +
         project(fj::silu(fj::slice(gate_up, -1, 0, f)) * fj::slice(gate_up, -1, f, 2 * f), y.w2);
}

// The logits [b, rows, vocab] of the last `rows` positions of tokens [b, n] placed at `start`
// (position 0 where `from_start`: see Positions).
fj::Tensor forward(fj::Context& ctx, Model& m, const fj::Tensor& tokens, const fj::Tensor& start,
                   int64_t rows, int64_t capacity, bool from_start = false) {
  const int64_t b = tokens.shape()[0], n = tokens.shape()[1];
  const Positions p = positions(ctx, m, start, n, capacity, from_start);
  fj::Tensor x = fj::embedding(m.embed, tokens);
  for (Layer& y : m.layers) x = layer(ctx, m, y, x, start, p);
  const fj::Tensor last = fj::slice(x, 1, n - rows, n);
  const fj::Tensor logits = project(fj::rms_norm(last, m.final_norm, 1e-5), m.lm_head);
  return fj::reshape(logits, {b, rows, m.c.vocab});
}

// The next token of each sequence [b, 1] (i32) from logits [b, 1, vocab]; a draw's random
// numbers come from `key`, {seed, offset} as data (i64 [2]).
fj::Tensor choose(const fj::Tensor& logits, const Run& r, const fj::Tensor& key) {
  if (r.temperature == 0) return fj::cast(fj::argmax(logits), fj::DType::i32);
  fj::Tensor scaled = logits * (1.0 / r.temperature);
  if (r.top_k > 0) scaled = fj::top_k_filter(scaled, r.top_k);
  if (r.top_p < 1.0) scaled = fj::top_p_filter(scaled, r.top_p);
  return fj::cast(fj::sample(scaled, 1.0, key), fj::DType::i32);
}

// Step `step`'s random key {seed, step}.
fj::Tensor random_key(fj::Context& ctx, const Run& r, uint64_t step) {
  return ctx.from_vector(std::vector<double>{double(r.seed), double(step)}, {2}, fj::DType::i64);
}

fj::Tensor position(fj::Context& ctx, int64_t p) {
  return ctx.from_vector(std::vector<double>{double(p)}, {}, fj::DType::i32);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct Generated {
  std::vector<double> prompt, tokens;  // [batch, prompt], [batch, new_tokens] row-major
  // The prefill; the first decode step, which plans and compiles the decode-shaped kernels; the
  // decode steps after it (the steady state that tokens/s describes).
  double first_token_s = 0, first_step_s = 0, decode_s = 0;
  // The same prefill once more (prefill_again_s): the time to first token of a served request.
  double first_token_again_s = 0;
  // Host time of the timed steps: recording each step's ops (none when replayed), and running it
  // (an eval, or Replay::run: each returns once the step is queued, but waits while the launch
  // queue is full).
  double record_s = 0, run_s = 0;
  std::vector<std::vector<double>> logits;  // with --check: each step's [batch, vocab]
  fj::Context::Stats after_first_step;      // the Context's counters once the first step ran
  // ... and once the last step ran (before the prefill measured again, whose trace differs
  // from the first prefill's under --check, which also evaluates its logits).
  fj::Context::Stats after_decode;
};

// After the first decode step (which plans and compiles): its time since `t0`, and the counters
// the steady state is measured from; `t0` restarts.
void first_step_done(fj::Context& ctx, Generated& g, std::chrono::steady_clock::time_point& t0) {
  ctx.synchronize();
  g.first_step_s = seconds_since(t0);
  g.after_first_step = ctx.stats();
  t0 = std::chrono::steady_clock::now();
}

// The decode steps recorded and evaluated one by one (--no-replay): each step records the whole
// model again, and its eval finds the plan in the trace memo.
void decode_recorded(fj::Context& ctx, Model& m, const Run& r, Generated& g,
                     std::vector<fj::Tensor>& steps, std::vector<fj::Tensor>& logits) {
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 1; s < r.new_tokens; ++s) {
    const auto recording = std::chrono::steady_clock::now();
    const fj::Tensor next =
        forward(ctx, m, steps.back(), position(ctx, r.prompt + s - 1), 1, r.capacity());
    if (r.check) logits.push_back(next);
    fj::Tensor chosen = choose(next, r, random_key(ctx, r, static_cast<uint64_t>(s)));
    const auto evaluating = std::chrono::steady_clock::now();
    steps.push_back(chosen.eval());
    if (s > 1) {
      g.record_s += std::chrono::duration<double>(evaluating - recording).count();
      g.run_s += seconds_since(evaluating);
    }
    if (s == 1) first_step_done(ctx, g, t0);
  }
  ctx.synchronize();
  g.decode_s = seconds_since(t0);
}

// The decode step recorded once and replayed (fusejit::Replay): on a GPU one CUDA graph launch
// per token. The step reads its input token, its position and its random key from buffers it
// writes itself for the next run: the token chosen over the one read, the position plus one, the
// key's offset plus one. It also writes the token it read into `history` [batch, new_tokens], at
// its column (position - prompt). Returns the tokens: history's columns, then the last one.
std::vector<fj::Tensor> decode_replayed(fj::Context& ctx, Model& m, const Run& r, Generated& g,
                                        const fj::Tensor& first) {
  auto t0 = std::chrono::steady_clock::now();
  const fj::DType i32 = fj::DType::i32;
  fj::Tensor token = first;  // [batch, 1], written in place from now on
  fj::Tensor pos = ctx.from_vector(std::vector<double>{double(r.prompt)}, {1}, i32).eval();
  fj::Tensor key = random_key(ctx, r, 1).eval();
  fj::Tensor history = ctx.zeros({r.batch, r.new_tokens}, i32).eval();
  const fj::Tensor next = forward(ctx, m, token, pos, 1, r.capacity());
  const fj::Tensor chosen = choose(next, r, key);
  fj::update_slice(history, 1, pos + ctx.scalar(double(-r.prompt), i32), token);
  fj::update_slice(token, 0, ctx.scalar(0, i32), chosen);
  fj::update_slice(pos, 0, ctx.scalar(0, i32), pos + ctx.scalar(1, i32));
  fj::update_slice(key, 0, ctx.scalar(1, i32),
                   fj::slice(key, 0, 1, 2) + ctx.scalar(1, fj::DType::i64));
  fj::Replay step(r.check ? std::vector<fj::Tensor>{token, next} : std::vector<fj::Tensor>{token});
  for (int64_t s = 1; s < r.new_tokens; ++s) {
    const auto running = std::chrono::steady_clock::now();
    step.run();
    if (s > 1) g.run_s += seconds_since(running);
    if (r.check) g.logits.push_back(step.outputs()[1].to_host());  // waits for the step
    if (s == 1) first_step_done(ctx, g, t0);
  }
  ctx.synchronize();
  g.decode_s = seconds_since(t0);
  if (!step.graph()) std::printf("decode step: no CUDA graph: %s\n", step.why_not_graph().c_str());
  return {history, token};
}

// The prompt's prefill (the caches emptied first): its logits and the first token chosen from
// them, both pending.
std::pair<fj::Tensor, fj::Tensor> prefill(fj::Context& ctx, Model& m, const Run& r,
                                          const std::vector<double>& prompt) {
  const fj::Tensor tokens = ctx.from_vector(prompt, {r.batch, r.prompt}, fj::DType::i32);
  fj::Tensor logits = forward(ctx, m, tokens, position(ctx, 0), 1, r.capacity(), true);
  fj::Tensor first = choose(logits, r, random_key(ctx, r, 0));
  return {logits, first};
}

// Prefill, then new_tokens - 1 decode steps.
Generated generate(fj::Context& ctx, Model& m, const Run& r) {
  Generated g;
  for (int64_t i = 0; i < r.batch * r.prompt; ++i) {
    g.prompt.push_back(double((i * 7919 + 13) % m.c.vocab));
  }
  empty_caches(ctx, m, r.batch, r.capacity());
  ctx.synchronize();
  std::vector<fj::Tensor> steps, logits;  // logits kept (and so computed) only for --check
  const auto t0 = std::chrono::steady_clock::now();
  auto [first, chosen] = prefill(ctx, m, r, g.prompt);
  steps.push_back(chosen);
  if (r.check) {
    fj::eval({first, steps[0]});
    g.logits.push_back(first.to_host());
  } else {
    steps[0].eval();
  }
  ctx.synchronize();
  g.first_token_s = seconds_since(t0);
  std::vector<std::vector<double>> each;  // per step, [batch]
  if (r.replay && r.new_tokens > 1) {
    const std::vector<fj::Tensor> made = decode_replayed(ctx, m, r, g, steps[0]);
    const std::vector<double> history = made[0].to_host(), last = made[1].to_host();
    for (int64_t s = 0; s < r.new_tokens; ++s) {
      std::vector<double> at(static_cast<size_t>(r.batch));
      for (int64_t b = 0; b < r.batch; ++b) {
        at[size_t(b)] =
            s + 1 < r.new_tokens ? history[size_t(b * r.new_tokens + s)] : last[size_t(b)];
      }
      each.push_back(std::move(at));
    }
  } else {
    decode_recorded(ctx, m, r, g, steps, logits);
    for (const fj::Tensor& t : steps) each.push_back(t.to_host());
  }
  for (int64_t b = 0; b < r.batch; ++b) {
    for (const std::vector<double>& t : each) g.tokens.push_back(t[static_cast<size_t>(b)]);
  }
  for (const fj::Tensor& t : logits) g.logits.push_back(t.to_host());
  g.after_decode = ctx.stats();
  return g;
}

// The same prefill once more in this process, the caches emptied again: planned, compiled and
// loaded already, as a served request's is (and as gpt-fast's, which compiles before it times).
// Seconds.
double prefill_again_s(fj::Context& ctx, Model& m, const Run& r, const Generated& g) {
  empty_caches(ctx, m, r.batch, r.capacity());
  ctx.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  prefill(ctx, m, r, g.prompt).second.eval();
  ctx.synchronize();
  return seconds_since(t0);
}

// Sequence b as the checks replay it: its prompt, then the tokens generated but the last.
std::vector<double> replayed(const Run& r, const Generated& g, int64_t b) {
  const auto prompt = g.prompt.begin() + static_cast<std::ptrdiff_t>(b * r.prompt);
  const auto made = g.tokens.begin() + static_cast<std::ptrdiff_t>(b * r.new_tokens);
  std::vector<double> out(prompt, prompt + static_cast<std::ptrdiff_t>(r.prompt));
  out.insert(out.end(), made, made + static_cast<std::ptrdiff_t>(r.new_tokens - 1));
  return out;
}

// Sequence b's logits at each of the new_tokens steps and the token chosen from them, against
// `want`: that sequence's [new_tokens, vocab] logits from another computation.
void compare_steps(const Run& r, const Generated& g, int64_t b, const double* want, size_t vocab,
                   llama_reference::Comparison& out) {
  for (int64_t s = 0; s < r.new_tokens; ++s) {
    llama_reference::compare(g.logits[size_t(s)].data() + size_t(b) * vocab,
                             want + size_t(s) * vocab, vocab,
                             static_cast<size_t>(g.tokens[size_t(b * r.new_tokens + s)]),
                             kReferenceBound, out);
  }
}

// Greedy only: the whole sequences (prompts and the tokens generated but the last) in one
// prefill with fresh caches, whose logits at the last new_tokens positions each step's logits
// (computed with the KV cache) are held against. Two computations in bf16 may order a near-tie
// apart, so a token is wrong only where the rerun's argmax beats it by more than a tie's
// tolerance (llama_reference::compare).
llama_reference::Comparison check_greedy(fj::Context& ctx, Model& m, const Run& r,
                                         const Generated& g) {
  const int64_t n = r.prompt + r.new_tokens - 1;
  std::vector<double> all;
  for (int64_t b = 0; b < r.batch; ++b) {
    const std::vector<double> one = replayed(r, g, b);
    all.insert(all.end(), one.begin(), one.end());
  }
  empty_caches(ctx, m, r.batch, r.capacity());
  const fj::Tensor tokens = ctx.from_vector(all, {r.batch, n}, fj::DType::i32);
  const std::vector<double> want =  // [batch, new_tokens, vocab]
      forward(ctx, m, tokens, position(ctx, 0), r.new_tokens, r.capacity(), true).to_host();
  const auto vocab = static_cast<size_t>(m.c.vocab);
  llama_reference::Comparison out;
  for (int64_t b = 0; b < r.batch; ++b) {
    compare_steps(r, g, b, want.data() + size_t(b * r.new_tokens) * vocab, vocab, out);
  }
  return out;
}

// The model's weights on the host, for the double-precision reference.
// A projection's weights as the model computes with them: q * scale[row] for int8 weights (exact
// in f32: 8 bits of q times bf16's 8).
std::vector<double> host_values(const Proj& p) {
  if (!p.int8()) return p.w.to_host();
  const int64_t rows = p.w.shape()[0];
  return (fj::cast(p.w, fj::DType::f32) * fj::reshape(fj::cast(p.scale, fj::DType::f32), {rows, 1}))
      .to_host();
}

llama_reference::Weights host_weights(const Model& m) {
  const Config& c = m.c;
  llama_reference::Weights w;
  w.shape = {.layers = c.layers,
             .hidden = c.hidden,
             .heads = c.heads,
             .kv_heads = c.kv_heads,
             .ffn = c.ffn,
             .vocab = c.vocab,
             .rope_base = c.rope_base,
             .norm_eps = 1e-5};
  w.embed = m.embed.to_host();
  w.final_norm = m.final_norm.to_host();
  w.lm_head = host_values(m.lm_head);
  const auto rows = [](const std::vector<double>& all, int64_t from, int64_t count, int64_t cols) {
    const auto at = all.begin() + static_cast<std::ptrdiff_t>(from * cols);
    return std::vector<double>(at, at + static_cast<std::ptrdiff_t>(count * cols));
  };
  const int64_t h = c.hidden, kv = c.kv_heads * c.head_dim();
  for (const Layer& y : m.layers) {
    const std::vector<double> qkv = host_values(y.wqkv), gate_up = host_values(y.w13);
    w.layers.push_back({y.attn_norm.to_host(), rows(qkv, 0, h, h), rows(qkv, h, kv, h),
                        rows(qkv, h + kv, kv, h), host_values(y.wo), y.ffn_norm.to_host(),
                        rows(gate_up, 0, c.ffn, h), rows(gate_up, c.ffn, c.ffn, h),
                        host_values(y.w2)});
  }
  return w;
}

// Each step's logits against the double-precision reference fed the same tokens (the prompt and
// the tokens generated before the step), one step and sequence at a time.
llama_reference::Comparison check_reference(const Model& m, const Run& r, const Generated& g) {
  const llama_reference::Weights w = host_weights(m);
  const auto vocab = static_cast<size_t>(m.c.vocab);
  llama_reference::Comparison out;
  for (int64_t b = 0; b < r.batch; ++b) {
    const std::vector<double> one = replayed(r, g, b);
    const std::vector<int64_t> tokens(one.begin(), one.end());
    compare_steps(r, g, b, llama_reference::logits(w, tokens, r.prompt - 1).data(), vocab, out);
  }
  return out;
}

// One check's line; passes when the logits are within the bound of `against`'s, and every greedy
// token is the largest of its own step's logits and, by more than a tie's tolerance, not below
// the largest of `against`'s.
bool print_check(const char* against, const llama_reference::Comparison& c, const Run& r) {
  const bool ok = c.error <= kReferenceBound && c.mismatches == 0 && c.off_own_argmax == 0;
  std::printf(
      "check: logits against %s: largest relative error %.2e over %lld steps (bound %.0e); "
      "greedy tokens not its argmax: %lld, and %lld near-ties (closer than the bound); not the "
      "argmax of their own logits: %lld: %s\n",
      against, c.error, (long long)(r.batch * r.new_tokens), kReferenceBound,
      (long long)c.mismatches, (long long)c.near_ties, (long long)c.off_own_argmax,
      ok ? "pass" : "FAIL");
  return ok;
}

double gigabytes(double bytes) { return bytes / 1e9; }

void report(fj::Context& ctx, Model& m, const Run& r, const Generated& g) {
  const Config& c = m.c;
  // Per step every weight is read but the embedding's (a lookup of a row a token).
  double read = double(m.final_norm.numel()) * fj::dtype_size(m.final_norm.dtype());
  for (const Proj* p : projections(m)) read += bytes_of(*p);
  read += 2.0 * double(c.layers) * double(c.hidden) * fj::dtype_size(kDtype);  // the norms
  const double weights = read + double(m.embed.numel()) * fj::dtype_size(m.embed.dtype());
  const double cache = 2.0 * c.layers * r.batch * c.kv_heads * r.capacity() * c.head_dim() * 2.0;
  const double steps = double(r.new_tokens - 2);  // timed: those after the first decode step
  std::printf("config %s: %lld layers, hidden %lld, %lld heads (%lld KV), ffn %lld, vocab %lld\n",
              c.name.c_str(), (long long)c.layers, (long long)c.hidden, (long long)c.heads,
              (long long)c.kv_heads, (long long)c.ffn, (long long)c.vocab);
  const fj::Options& o = ctx.options();
  std::printf("engine: FUSEJIT_PDL=%s FUSEJIT_GEMV_RING=%d FUSEJIT_GEMV_EPILOGUE=%d\n",
              o.pdl == fj::PdlMode::all    ? "all"
              : o.pdl == fj::PdlMode::gemv ? "gemv"
                                           : "off",
              o.gemv_ring ? 1 : 0, o.gemv_epilogue ? 1 : 0);
  std::printf("memory: weights %.2f GB%s, KV cache %.3f GB (batch %lld, %lld positions)\n",
              gigabytes(weights), m.lm_head.int8() ? " (projections int8)" : "", gigabytes(cache),
              (long long)r.batch, (long long)r.capacity());
  std::printf("time to first token: %.2f ms (prefill of %lld tokens)\n", g.first_token_s * 1e3,
              (long long)r.prompt);
  std::printf(
      "time to first token, again: %.2f ms (the same prefill once more: planned and loaded "
      "already, as a served request's)\n",
      g.first_token_again_s * 1e3);
  if (r.new_tokens > 1) {
    std::printf("first decode step: %.2f ms (plans and compiles the decode kernels)\n",
                g.first_step_s * 1e3);
  }
  if (steps > 0) {
    const double step_s = g.decode_s / steps;
    std::printf(
        "decode: %.3f ms per step over the %lld steps after the first, %.1f tokens/s (%.1f per "
        "sequence), weights read at %.0f GB/s\n",
        step_s * 1e3, (long long)steps, double(r.batch) / step_s, 1.0 / step_s,
        gigabytes(read) / step_s);
    std::printf(
        "host per decode step: %.1f us recording its ops, %.1f us %s (%s)\n",
        g.record_s / steps * 1e6, g.run_s / steps * 1e6, r.replay ? "in Replay::run" : "in eval",
        ctx.has_gpu() ? "which returns once the step is queued, or waits while the GPU is behind"
                      : "which runs the CPU reference");
  } else {
    std::printf("decode: give --new-tokens 3 or more for a steady-state tokens/s\n");
  }
  const fj::Context::Stats s = ctx.stats();
  std::printf(
      "fusejit: %lld evals, %lld plans, %lld kernels compiled, %lld graph launches; %lld "
      "replayed steps, %lld of them one CUDA graph launch\n",
      (long long)s.traces_evaluated, (long long)s.plans_built, (long long)s.kernels_compiled,
      (long long)s.graph_launches, (long long)s.replay_runs, (long long)s.replay_graph_launches);
  if (steps > 0) {  // what the steady state cost beyond running: nothing, when all is cached
    const fj::Context::Stats& f = g.after_first_step;
    const fj::Context::Stats& d = g.after_decode;
    std::printf(
        "after the first decode step: %lld plans, %lld kernels compiled, %lld dynamic "
        "instances in %lld steps\n",
        (long long)(d.plans_built - f.plans_built),
        (long long)(d.kernels_compiled - f.kernels_compiled),
        (long long)(d.dynamic_instances - f.dynamic_instances), (long long)steps);
  }
  std::printf("tokens of sequence 0:");
  for (int64_t i = 0; i < r.new_tokens && i < 32; ++i) {
    std::printf(" %lld", (long long)g.tokens[static_cast<size_t>(i)]);
  }
  std::printf("%s\n", r.new_tokens > 32 ? " ..." : "");
}

constexpr const char* kUsage = R"(usage: generate [flags]

Text generation with a Llama-architecture decoder on fusejit: prefill of the prompt, then one
decode step per token with a KV cache written in place. Without a GPU the CPU reference runs
it, on the tiny shape unless told otherwise (prompt 8, 6 new tokens).

The model:
  --config NAME        llama3-8b (the default on a GPU: 32 layers, hidden 4096, 32 heads,
                       8 KV heads, FFN 14336, vocab 128256, RoPE base 500000) or tiny
                       (2 layers, hidden 256, 4 heads, 2 KV heads, FFN 512, vocab 1000, RoPE
                       base 10000; the default without a GPU). The flags below change one
                       dimension of it, wherever they stand on the command line.
  --layers N  --hidden N  --heads N  --kv-heads N  --ffn N  --vocab N  --rope-base X
  --weights PATH       a Hugging Face Llama checkpoint instead of random weights: a
                       .safetensors file, or the index (model.safetensors.index.json) of a
                       sharded one. The shape flags must match its config.json; each tensor's
                       shape is checked against them, and float weights of another dtype are
                       cast to bf16. Projections stored as I8 with a "<name>.scales" tensor
                       (bf16 or f32, one per output row) load as int8. Not modelled:
                       config.json's rope_scaling and an rms_norm_eps other than 1e-5.
  --random-weights     weights drawn on the device by fusejit's Philox generator (the default)
  --save-weights PATH  write the weights used to one .safetensors file, in the same names, as
                       bf16 (with --int8: each projection as I8 and its scales)
  --int8               weight-only int8: every projection (q/k/v, o, gate/up, down, lm_head)
                       quantized per output row, scale = max |w| / 127, q = round(w / scale);
                       the embedding and norms stay bf16

The run:
  --batch N            sequences decoded together (1)
  --prompt N           prompt tokens of each sequence (128)
  --new-tokens N       tokens generated after the prompt (256); --tokens N is the same
  --temperature X      0 decodes greedily (the default); above 0 samples from the logits / X
  --top-k N            sample among the N largest logits (needs --temperature)
  --top-p X            sample from the smallest nucleus of probability mass X, in (0, 1]
  --seed N             the random weights' and the sampling's seed (2026)
  --check              check every step's logits and greedy token against a rerun of the whole
                       sequence without the cache and, for models up to 50M parameters, a
                       double-precision decoder on the host (relative error at most 3e-2);
                       greedy only
  --no-replay          record and evaluate every decode step instead of replaying one recorded
                       step (one CUDA graph launch per token on a GPU)
  --help               print this and exit

The engine reads its FUSEJIT_* environment variables; where they do not name them, this program
turns on FUSEJIT_PDL=all, FUSEJIT_GEMV_RING=1 and FUSEJIT_GEMV_EPILOGUE=1 (FUSEJIT_PDL=0
FUSEJIT_GEMV_RING=0 FUSEJIT_GEMV_EPILOGUE=0 gives the library's defaults). The report's first
line says which are in force.
)";

// A flag's value as a whole number of at least `lo`, or an error naming the flag and the value.
int64_t whole_number(const std::string& flag, const std::string& v, int64_t lo = 1) {
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || n < lo) {
    throw std::invalid_argument(flag + " takes a whole number of at least " + std::to_string(lo) +
                                ", not '" + v + "'");
  }
  return n;
}

// A flag's value as a finite number, or an error naming the flag and the value.
double real_number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE || !std::isfinite(x)) {
    throw std::invalid_argument(flag + " takes a finite number, not '" + v + "'");
  }
  return x;
}

// Applies one flag of the model's shape, the run or sampling, and its value; false for a flag
// that is none of them.
bool apply(Config& c, Run& r, const std::string& flag, const std::string& v) {
  static const std::map<std::string, int64_t Config::*> kShape = {
      {"--layers", &Config::layers}, {"--hidden", &Config::hidden},
      {"--heads", &Config::heads},   {"--kv-heads", &Config::kv_heads},
      {"--ffn", &Config::ffn},       {"--vocab", &Config::vocab}};
  static const std::map<std::string, int64_t Run::*> kRun = {{"--batch", &Run::batch},
                                                             {"--prompt", &Run::prompt},
                                                             {"--new-tokens", &Run::new_tokens},
                                                             {"--tokens", &Run::new_tokens}};
  if (auto it = kShape.find(flag); it != kShape.end()) {
    c.*(it->second) = whole_number(flag, v);
  } else if (auto run = kRun.find(flag); run != kRun.end()) {
    r.*(run->second) = whole_number(flag, v);
  } else if (flag == "--top-k") {
    r.top_k = whole_number(flag, v);
  } else if (flag == "--seed") {
    r.seed = static_cast<uint64_t>(whole_number(flag, v, 0));
  } else if (flag == "--temperature") {
    r.temperature = real_number(flag, v);
  } else if (flag == "--top-p") {
    r.top_p = real_number(flag, v);
  } else if (flag == "--rope-base") {
    c.rope_base = real_number(flag, v);
  } else if (flag == "--weights") {
    r.weights = v;
  } else if (flag == "--save-weights") {
    r.save_weights = v;
  } else {
    return false;
  }
  return true;
}

// The shape, run and sampling checks that no single flag's value can make.
void check_flags(const Config& c, const Run& r) {
  if (c.hidden % c.heads != 0 || c.heads % c.kv_heads != 0 || c.head_dim() % 2 != 0) {
    throw std::invalid_argument(
        "--hidden must split into --heads heads of even size, and --heads into groups of "
        "--kv-heads (hidden " +
        std::to_string(c.hidden) + ", heads " + std::to_string(c.heads) + ", KV heads " +
        std::to_string(c.kv_heads) + ")");
  }
  if (!(c.rope_base > 0)) throw std::invalid_argument("--rope-base must be above 0");
  if (r.temperature < 0) throw std::invalid_argument("--temperature must be >= 0");
  if (r.check && r.temperature > 0) throw std::invalid_argument("--check needs greedy decoding");
  if (!(r.top_p > 0 && r.top_p <= 1)) throw std::invalid_argument("--top-p must be in (0, 1]");
  if (r.temperature == 0 && (r.top_k > 0 || r.top_p < 1)) {
    throw std::invalid_argument("--top-k and --top-p filter sampling: give --temperature > 0");
  }
}

bool wants_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return true;
  }
  return false;
}

// Reads the command line into `c` and `r`. --config applies first, wherever it stands, so that
// the shape flags change the config it names.
void parse(int argc, char** argv, Config& c, Run& r) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] != "--config") continue;
    if (i + 1 == args.size())
      throw std::invalid_argument("--config needs a value: tiny or llama3-8b");
    const std::string& v = args[++i];
    if (v != "tiny" && v != "llama3-8b") {
      throw std::invalid_argument("--config takes tiny or llama3-8b, not '" + v + "'");
    }
    c = v == "tiny" ? tiny() : Config{};
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--check") {
      r.check = true;
    } else if (a == "--int8") {
      r.int8 = true;
    } else if (a == "--no-replay") {
      r.replay = false;
    } else if (a == "--random-weights") {
      // the default: weights come from a file only with --weights
    } else if (a == "--config") {
      ++i;  // applied above
    } else if (i + 1 < args.size() && apply(c, r, a, args[i + 1])) {
      ++i;
    } else {
      Config c_probe = c;  // is `a` a flag that takes a value, given none?
      Run r_probe = r;
      const bool known = apply(c_probe, r_probe, a, "1");
      throw std::invalid_argument(known ? a + " needs a value"
                                        : "unknown flag " + a + " (generate --help lists them)");
    }
  }
  check_flags(c, r);
}

// The Context's options (see the top of this file).
fj::Options decode_options() {
  fj::Options o = fj::Options::from_env();
  if (std::getenv("FUSEJIT_PDL") == nullptr) o.pdl = fj::PdlMode::all;
  if (std::getenv("FUSEJIT_GEMV_RING") == nullptr) o.gemv_ring = true;
  if (std::getenv("FUSEJIT_GEMV_EPILOGUE") == nullptr) o.gemv_epilogue = true;
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  if (wants_help(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  Config c;
  Run r;
  fj::Context ctx(decode_options());
  if (!ctx.has_gpu()) {  // the CPU reference: the tiny shape unless told otherwise
    c = tiny();
    r.prompt = 8;
    r.new_tokens = 6;
  }
  parse(argc, argv, c, r);
  if (!ctx.has_gpu()) std::printf("no GPU: the CPU reference runs the model\n");
  Model m = r.weights.empty() ? random_model(ctx, c, r) : loaded_model(ctx, c, r);
  if (!r.save_weights.empty()) save_weights(m, r.save_weights);
  Generated g = generate(ctx, m, r);
  g.first_token_again_s = prefill_again_s(ctx, m, r, g);
  report(ctx, m, r, g);
  if (r.check) {
    const llama_reference::Comparison rerun = check_greedy(ctx, m, r, g);
    bool passed = print_check("a rerun without the cache", rerun, r);
    if (parameters(c) <= kReferenceMaxParameters) {
      const llama_reference::Comparison ref = check_reference(m, r, g);
      passed = print_check("a double-precision reference", ref, r) && passed;
    } else {
      std::printf(
          "check: no double-precision reference for %.1fB parameters (it runs up to %.0fM)\n",
          parameters(c) / 1e9, kReferenceMaxParameters / 1e6);
    }
    return passed ? 0 : 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "generate: %s\n", e.what());
  return 2;
}
