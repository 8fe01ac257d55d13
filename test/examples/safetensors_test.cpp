// examples/safetensors: files written by the writer read back bit for bit through a Context (the
// CPU reference without a GPU), every malformed file refused with a message that names the file
// and the tensor, and a model sharded over two files behind an index.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "safetensors.h"
#include "support/catch.h"
#include "support/quiet.h"

namespace fj = fusejit;
namespace st = safetensors;

namespace {

std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

// A tensor of `shape` whose bytes count up from `seed` (any pattern is a valid value of every
// dtype but bool, which gets 0 and 1).
st::HostTensor pattern(fj::DType dtype, fj::Shape shape, unsigned seed) {
  st::HostTensor t;
  t.dtype = dtype;
  t.shape = shape;
  size_t n = fj::dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  for (size_t i = 0; i < n; ++i) {
    const unsigned v = seed + 37 * static_cast<unsigned>(i);
    // Keep f16/bf16/f32 patterns away from NaN, whose payload a copy need not keep.
    t.bytes.push_back(static_cast<unsigned char>(dtype == fj::DType::boolean ? v & 1 : v & 0x3f));
  }
  return t;
}

// A file from a header given as text and `data` bytes, the length as `length` says (default:
// the header's own).
void write_raw(const std::string& path, const std::string& header, size_t data,
               int64_t length = -1) {
  const uint64_t n = length < 0 ? header.size() : static_cast<uint64_t>(length);
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << header << std::string(data, '\0');
}
// The header, then `data` as the tensors' bytes.
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(header.size() >> (8 * i)));
  out << header << data;
}

std::vector<unsigned char> host_bytes(const fj::Tensor& t) { return st::download(t).bytes; }

}  // namespace

TEST_CASE("safetensors: every supported dtype round-trips, bit for bit", "[safetensors]") {
  const std::map<std::string, st::HostTensor> tensors = {
      {"w.f32", pattern(fj::DType::f32, {3, 5}, 1)},
      {"w.f16", pattern(fj::DType::f16, {7}, 2)},
      {"w.bf16", pattern(fj::DType::bf16, {2, 3, 4}, 3)},
      {"ids.i32", pattern(fj::DType::i32, {6}, 4)},
      {"ids.i64", pattern(fj::DType::i64, {2, 2}, 5)},
      {"mask.bool", pattern(fj::DType::boolean, {9}, 6)},
      {"scale", pattern(fj::DType::f32, {}, 7)},  // rank 0
  };
  const std::string path = scratch("all.safetensors");
  st::write(path, tensors, {{"format", "pt"}});

  const st::File file(path);
  CHECK(file.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  REQUIRE(file.tensors().size() == tensors.size());
  std::ifstream in(path, std::ios::binary);
  unsigned char length[8];
  in.read(reinterpret_cast<char*>(length), 8);
  CHECK(length[0] % 8 == 0);  // the data section starts 8-byte aligned
  CHECK(file.tensors().at("w.bf16").dtype_name == "BF16");
  CHECK(file.tensors().at("mask.bool").dtype_name == "BOOL");

  fj::Context ctx(fj::testing::quiet());
  for (const auto& [name, want] : tensors) {
    INFO(name);
    const st::TensorInfo& info = file.tensors().at(name);
    REQUIRE(info.dtype == want.dtype);
    CHECK(info.shape == want.shape);
    const fj::Tensor t = file.load(ctx, name);
    CHECK(t.dtype() == want.dtype);
    CHECK(t.shape() == want.shape);
    CHECK(host_bytes(t) == want.bytes);
  }
  // A loaded tensor computes like any other: 2 * w.f32 on the reference.
  const std::vector<double> w = file.load(ctx, "w.f32").to_host();
  const std::vector<double> twice = (file.load(ctx, "w.f32") * 2.0).to_host();
  REQUIRE(twice.size() == w.size());
  for (size_t i = 0; i < w.size(); ++i) CHECK(twice[i] == 2 * w[i]);
}

TEST_CASE("safetensors: malformed files are refused, naming the file and tensor", "[safetensors]") {
  const std::string path = scratch("bad.safetensors");
  auto refused = [&](const std::string& what) {
    INFO(what);
    REQUIRE_THROWS_AS(st::File(path), fj::UsageError);
    REQUIRE_THROWS_WITH(st::File(path), ContainsSubstring(path) && ContainsSubstring(what));
  };
  const std::string entry = R"("dtype":"F32","shape":[2,2],"data_offsets":)";
  SECTION("shorter than the header length") {
    std::ofstream(path, std::ios::binary) << "abc";
    refused("truncated: 3 bytes");
  }
  SECTION("a header longer than the file") {
    write_raw(path, "{}", 0, 1000);
    refused("the header length says 1000 bytes, but the file has 10 in all");
  }
  SECTION("a header that is not JSON") {
    write_raw(path, R"({"w": {"dtype": "F32",)", 0);
    refused("the header is not valid JSON");
  }
  SECTION("a header that is not an object") {
    write_raw(path, "[1, 2]", 0);
    refused("the header must be a JSON object");
  }
  SECTION("data cut short") {
    write_raw(path, R"({"w":{)" + entry + "[0,16]}}", 12);
    refused("tensor w: data_offsets [0, 16] lie outside the data section of 12 bytes");
  }
  SECTION("offsets past the data") {
    write_raw(path, R"({"w":{)" + entry + "[32,48]}}", 16);
    refused("tensor w: data_offsets [32, 48] lie outside");
  }
  SECTION("offsets that disagree with the shape") {
    write_raw(path, R"({"w":{)" + entry + "[0,12]}}", 16);
    refused("tensor w: F32 [2, 2] takes 16 bytes, but data_offsets give 12");
  }
  SECTION("a negative offset") {
    write_raw(path, R"({"w":{)" + entry + "[-4,12]}}", 16);
    refused("tensor w: \"data_offsets\" holds -4, not a non-negative integer");
  }
  SECTION("overlapping tensors") {
    write_raw(path, R"({"a":{)" + entry + R"([0,16]},"b":{)" + entry + "[8,24]}}", 24);
    refused("tensors a [0, 16) and b [8, 24) overlap");
  }
  SECTION("an unknown dtype") {
    write_raw(path, R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4);
    refused("tensor w: unknown dtype \"F33\"");
  }
  SECTION("an entry without its fields") {
    write_raw(path, R"({"w":{"dtype":"F32"}})", 0);
    refused("tensor w: the entry must be an object with");
  }
  SECTION("metadata that is not strings") {
    write_raw(path, R"({"__metadata__":{"step":3}})", 0);
    refused("\"__metadata__\" entry step must be a string");
  }
}

TEST_CASE("safetensors: a dtype fusejit lacks opens, and loading it names the tensor",
          "[safetensors]") {
  const std::string path = scratch("uint8.safetensors");
  write_raw(path,
            R"({"q":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
            R"("s":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
            R"("__metadata__":{"quant":"uint8"}})",
            8);
  const st::File file(path);
  CHECK(file.tensors().at("q").dtype_name == "U8");
  CHECK_FALSE(file.tensors().at("q").dtype.has_value());
  CHECK(file.metadata().at("quant") == "uint8");
  fj::Context ctx(fj::testing::quiet());
  CHECK(file.load(ctx, "s").to_host() == std::vector<double>{0.0});
  REQUIRE_THROWS_WITH(file.load(ctx, "q"),
                      ContainsSubstring(path) &&
                          ContainsSubstring("tensor q has dtype U8, which fusejit does not "
                                            "support yet") &&
                          ContainsSubstring("convert the checkpoint"));
  REQUIRE_THROWS_WITH(file.load(ctx, "k"), ContainsSubstring("no tensor k"));
}

TEST_CASE("safetensors: int8 weights and their scales load as i8 and f32", "[safetensors]") {
  const std::string path = scratch("int8.safetensors");
  // q: [2, 3] int8 (-128, -1, 0, 1, 2, 127), then s: [2] f32 (0.5, 2).
  std::string bytes = {'\x80', '\xff', '\x00', '\x01', '\x02', '\x7f', '\x00', '\x00'};
  for (float f : {0.5f, 2.0f}) bytes.append(reinterpret_cast<const char*>(&f), 4);
  write_raw(path,
            R"({"q":{"dtype":"I8","shape":[2,3],"data_offsets":[0,6]},)"
            R"("s":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
            bytes);
  const st::File file(path);
  REQUIRE(file.tensors().at("q").dtype == fj::DType::i8);
  fj::Context ctx(fj::testing::quiet());
  const fj::Tensor q = file.load(ctx, "q");
  CHECK(q.dtype() == fj::DType::i8);
  CHECK(q.to_host() == std::vector<double>{-128, -1, 0, 1, 2, 127});
  // Dequantized per row: q * s[row], as a weight-only int8 linear reads it.
  const fj::Tensor w = fj::cast(q, fj::DType::f32) * fj::reshape(file.load(ctx, "s"), {2, 1});
  CHECK(w.to_host() == std::vector<double>{-64, -0.5, 0, 2, 4, 254});
}

TEST_CASE("safetensors: the writer refuses bytes that do not match the shape", "[safetensors]") {
  st::HostTensor t = pattern(fj::DType::bf16, {4}, 0);
  t.bytes.pop_back();
  REQUIRE_THROWS_WITH(st::write(scratch("short.safetensors"), {{"w", t}}),
                      ContainsSubstring("tensor w: 7 bytes given, [4] of bf16 takes 8"));
}

TEST_CASE("safetensors: a model in two shards behind an index", "[safetensors]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "sharded";
  std::filesystem::create_directories(dir);
  const st::HostTensor a = pattern(fj::DType::bf16, {4, 2}, 1);
  const st::HostTensor b = pattern(fj::DType::f32, {3}, 2);
  const st::HostTensor c = pattern(fj::DType::i64, {2}, 3);
  st::write((dir / "model-00001-of-00002.safetensors").string(), {{"a", a}, {"b", b}});
  st::write((dir / "model-00002-of-00002.safetensors").string(), {{"c", c}});
  const std::string index = (dir / "model.safetensors.index.json").string();
  std::ofstream(index) << R"({"metadata": {"total_size": 48}, "weight_map": {
      "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors"}})";

  const st::Weights w(index);
  CHECK(w.names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(w.info("c").shape == fj::Shape{2});
  fj::Context ctx(fj::testing::quiet());
  CHECK(host_bytes(w.load(ctx, "a")) == a.bytes);
  CHECK(host_bytes(w.load(ctx, "b")) == b.bytes);
  CHECK(host_bytes(w.load(ctx, "c")) == c.bytes);
  REQUIRE_THROWS_WITH(w.info("d"), ContainsSubstring(index) && ContainsSubstring("no tensor d"));

  // One shard on its own is a model of its tensors.
  const st::Weights first((dir / "model-00001-of-00002.safetensors").string());
  CHECK(first.names() == std::vector<std::string>{"a", "b"});

  SECTION("an index that puts a tensor in the wrong shard") {
    std::ofstream(index) << R"({"weight_map": {"c": "model-00001-of-00002.safetensors"}})";
    REQUIRE_THROWS_WITH(st::Weights(index),
                        ContainsSubstring("weight_map puts tensor c in "
                                          "model-00001-of-00002.safetensors, which has no such"));
  }
  SECTION("an index naming a shard that is not there") {
    std::ofstream(index) << R"({"weight_map": {"c": "model-00009.safetensors"}})";
    REQUIRE_THROWS_WITH(st::Weights(index), ContainsSubstring("model-00009.safetensors: cannot "
                                                              "open"));
  }
  SECTION("an index without a weight map") {
    std::ofstream(index) << R"({"metadata": {}})";
    REQUIRE_THROWS_WITH(st::Weights(index), ContainsSubstring("\"weight_map\" object"));
  }
  SECTION("an index that is not JSON") {
    std::ofstream(index) << R"({"weight_map": )";
    REQUIRE_THROWS_WITH(st::Weights(index), ContainsSubstring("not valid JSON"));
  }
}
