// The safetensors reader and writer (safetensors.h): mapping, header validation, shards.
// Byte order: the format is little-endian and so are the hosts fusejit runs on (x86-64, arm64),
// so tensor bytes are handed over as they are; only the header length is read byte by byte.
#include "safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

namespace fj = fusejit;
using json = nlohmann::json;

namespace safetensors {
namespace {

// The format's dtypes: its name, bytes per element, and the fusejit dtype if there is one.
struct DTypeEntry {
  const char* name;
  uint64_t size;
  std::optional<fj::DType> dtype;
};

const DTypeEntry kDTypes[] = {
    {"F32", 4, fj::DType::f32}, {"F16", 2, fj::DType::f16},   {"BF16", 2, fj::DType::bf16},
    {"I32", 4, fj::DType::i32}, {"I64", 8, fj::DType::i64},   {"BOOL", 1, fj::DType::boolean},
    {"I8", 1, fj::DType::i8},   {"F64", 8, std::nullopt},     {"U8", 1, std::nullopt},
    {"I16", 2, std::nullopt},   {"U16", 2, std::nullopt},     {"U32", 4, std::nullopt},
    {"U64", 8, std::nullopt},   {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
};

const DTypeEntry* find_dtype(const std::string& name) {
  for (const DTypeEntry& e : kDTypes) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

const char* format_name(fj::DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e.name;
  }
  throw fj::UsageError("safetensors: no name for dtype " + std::string(fj::dtype_name(dtype)));
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw fj::UsageError("safetensors file " + path + ": " + what);
}

// Maps the whole file read-only; returns the mapping and its size.
std::pair<const unsigned char*, size_t> map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(err));
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail(path, "truncated: " + std::to_string(size) +
                   " bytes, less than the 8-byte header length every safetensors file starts "
                   "with (an interrupted download? fetch it again)");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file open
  if (map == MAP_FAILED) fail(path, std::string("cannot map: ") + std::strerror(err));
  return {static_cast<const unsigned char*>(map), size};
}

uint64_t little_endian_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative JSON integer; fails naming the tensor and the field otherwise.
uint64_t unsigned_field(const std::string& path, const std::string& name, const char* field,
                        const json& v) {
  if (!v.is_number_unsigned()) {
    fail(path, "tensor " + name + ": " + field + " holds " + v.dump() +
                   ", not a non-negative integer (the header is malformed)");
  }
  return v.get<uint64_t>();
}

fj::Shape parse_shape(const std::string& path, const std::string& name, const json& v) {
  if (!v.is_array()) fail(path, "tensor " + name + ": \"shape\" must be an array of integers");
  fj::Shape shape;
  for (const json& d : v) {
    const uint64_t n = unsigned_field(path, name, "\"shape\"", d);
    if (n > uint64_t(INT64_MAX)) fail(path, "tensor " + name + ": a dimension is too large");
    shape.push_back(static_cast<int64_t>(n));
  }
  return shape;
}

// The bytes a tensor of `shape` and elements of `size` bytes takes; fails on overflow.
uint64_t byte_count(const std::string& path, const std::string& name, const fj::Shape& shape,
                    uint64_t size) {
  uint64_t bytes = size;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
      fail(path, "tensor " + name + ": shape " + shape_text(shape) + " overflows 64 bits");
    }
  }
  return bytes;
}

// One header entry, checked: its dtype is the format's, its shape's byte count is its byte
// range's length, and the range lies inside the data section of `data_size` bytes.
TensorInfo parse_entry(const std::string& path, const std::string& name, const json& v,
                       uint64_t data_size) {
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
      !v.contains("data_offsets")) {
    fail(path, "tensor " + name +
                   ": the entry must be an object with \"dtype\", \"shape\" and "
                   "\"data_offsets\" (the header is malformed)");
  }
  const json& dt = v["dtype"];
  const DTypeEntry* entry = dt.is_string() ? find_dtype(dt.get<std::string>()) : nullptr;
  if (entry == nullptr) {
    fail(path, "tensor " + name + ": unknown dtype " + dt.dump() +
                   " (safetensors dtypes are F32, F16, BF16, I64, I32, BOOL, I8, U8, ...)");
  }
  TensorInfo t;
  t.dtype_name = entry->name;
  t.dtype = entry->dtype;
  t.shape = parse_shape(path, name, v["shape"]);
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2) {
    fail(path, "tensor " + name + ": \"data_offsets\" must be [begin, end]");
  }
  t.begin = unsigned_field(path, name, "\"data_offsets\"", off[0]);
  t.end = unsigned_field(path, name, "\"data_offsets\"", off[1]);
  if (t.begin > t.end || t.end > data_size) {
    fail(path, "tensor " + name + ": data_offsets [" + std::to_string(t.begin) + ", " +
                   std::to_string(t.end) + "] lie outside the data section of " +
                   std::to_string(data_size) +
                   " bytes (a truncated file, or a header from another file)");
  }
  const uint64_t want = byte_count(path, name, t.shape, entry->size);
  if (t.end - t.begin != want) {
    fail(path, "tensor " + name + ": " + t.dtype_name + " " + shape_text(t.shape) + " takes " +
                   std::to_string(want) + " bytes, but data_offsets give " +
                   std::to_string(t.end - t.begin) + " (the header is inconsistent)");
  }
  return t;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& v) {
  std::map<std::string, std::string> out;
  if (!v.is_object()) fail(path, "\"__metadata__\" must be an object of strings");
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_string()) {
      fail(path, "\"__metadata__\" entry " + it.key() + " must be a string");
    }
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

// No two tensors share a byte (empty tensors take none).
void check_overlaps(const std::string& path, const std::map<std::string, TensorInfo>& tensors) {
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> ranges;
  for (const auto& [name, t] : tensors) {
    if (t.end > t.begin) ranges.emplace_back(t.begin, t.end, name);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    const auto& [b0, e0, n0] = ranges[i - 1];
    const auto& [b1, e1, n1] = ranges[i];
    if (b1 < e0) {
      fail(path, "tensors " + n0 + " [" + std::to_string(b0) + ", " + std::to_string(e0) +
                     ") and " + n1 + " [" + std::to_string(b1) + ", " + std::to_string(e1) +
                     ") overlap (the header is corrupt: rewrite the file)");
    }
  }
}

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail(path, std::string("not valid JSON: ") + e.what());
  }
}

}  // namespace

File::File(const std::string& path) : path_(path) {
  std::tie(map_, size_) = map_file(path);
  try {
    const uint64_t n = little_endian_u64(map_);
    if (n > size_ - 8) {
      fail(path, "the header length says " + std::to_string(n) + " bytes, but the file has " +
                     std::to_string(size_) + " in all (truncated, or not a safetensors file)");
    }
    data_start_ = 8 + n;
    json header;
    try {
      header = json::parse(map_ + 8, map_ + data_start_);
    } catch (const json::exception& e) {
      fail(path, std::string("the header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) fail(path, "the header must be a JSON object");
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        metadata_ = parse_metadata(path, it.value());
      } else {
        tensors_[it.key()] = parse_entry(path, it.key(), it.value(), size_ - data_start_);
      }
    }
    check_overlaps(path, tensors_);
  } catch (...) {  // the destructor does not run for a constructor that throws
    munmap(const_cast<unsigned char*>(map_), size_);
    throw;
  }
}

File::~File() { munmap(const_cast<unsigned char*>(map_), size_); }

const unsigned char* File::bytes(const TensorInfo& info) const {
  return map_ + data_start_ + info.begin;
}

fj::Tensor File::load(fj::Context& ctx, const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, "no tensor " + name);
  const TensorInfo& t = it->second;
  if (!t.dtype) {
    fail(path_, "tensor " + name + " has dtype " + t.dtype_name +
                    ", which fusejit does not support yet (no 8-bit, unsigned or f64 dtype): "
                    "convert the checkpoint to BF16, F16 or F32 first");
  }
  return ctx.from_host(bytes(t), t.end - t.begin, t.shape, *t.dtype);
}

Weights::Weights(const std::string& path) : path_(path) {
  if (std::filesystem::path(path).extension() != ".json") {
    files_.push_back(std::make_unique<File>(path));
    for (const auto& entry : files_.back()->tensors()) where_[entry.first] = 0;
    return;
  }
  const json index = read_json_file(path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    fail(path, "an index must hold a \"weight_map\" object (tensor name -> shard file)");
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::map<std::string, size_t> shards;  // shard file name -> index into files_
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) fail(path, "weight_map entry " + name + " must name a shard file");
    const std::string file = shard.get<std::string>();
    auto [it, fresh] = shards.emplace(file, files_.size());
    if (fresh) files_.push_back(std::make_unique<File>((dir / file).string()));
    if (files_[it->second]->tensors().count(name) == 0) {
      fail(path, "weight_map puts tensor " + name + " in " + file +
                     ", which has no such tensor (the index belongs to other shards)");
    }
    where_[name] = it->second;
  }
}

std::vector<std::string> Weights::names() const {
  std::vector<std::string> out;
  for (const auto& entry : where_) out.push_back(entry.first);
  return out;
}

const File& Weights::file_of(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) fail(path_, "no tensor " + name);
  return *files_[it->second];
}

const TensorInfo& Weights::info(const std::string& name) const {
  return file_of(name).tensors().at(name);
}

fj::Tensor Weights::load(fj::Context& ctx, const std::string& name) const {
  return file_of(name).load(ctx, name);
}

std::string shape_text(const fj::Shape& shape) {
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

HostTensor download(const fj::Tensor& t) {
  HostTensor h;
  h.dtype = t.dtype();
  h.shape = t.shape();
  h.bytes.resize(static_cast<size_t>(t.numel()) * fj::dtype_size(t.dtype()));
  t.copy_to_host(h.bytes.data(), h.bytes.size());
  return h;
}

void write(const std::string& path, const std::map<std::string, HostTensor>& tensors,
           const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") fail(path, "a tensor may not be called __metadata__");
    const uint64_t want = byte_count(path, name, t.shape, uint64_t(fj::dtype_size(t.dtype)));
    if (t.bytes.size() != want) {
      fail(path, "tensor " + name + ": " + std::to_string(t.bytes.size()) + " bytes given, " +
                     shape_text(t.shape) + " of " + std::string(fj::dtype_name(t.dtype)) +
                     " takes " + std::to_string(want));
    }
    header[name] = {{"dtype", format_name(t.dtype)},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + want}}};
    offset += want;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& entry : tensors) {
    const std::vector<unsigned char>& b = entry.second.bytes;
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  out.close();
  if (!out) fail(path, std::string("cannot write: ") + std::strerror(errno));
}

}  // namespace safetensors
