// cache/entry: encodes and checks the bytes of one disk entry; the layout is in entry.h and
// docs/cache-format.md.
#include "cache/entry.h"

#include <fmt/format.h>

#include "ir/digest.h"

namespace fusejit::cache {

namespace {

// Names and archs are short; anything longer is a corrupt size field, not a kernel.
constexpr uint32_t kMaxNameSize = 4096;
constexpr uint32_t kMaxArchSize = 64;
constexpr size_t kChecksumOffset = 56;

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(std::string_view bytes, size_t offset, int size) {
  uint64_t v = 0;
  for (int i = size - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(bytes[offset + static_cast<size_t>(i)]);
  }
  return v;
}

struct Header {
  uint32_t version = 0;
  KernelKey key;
  uint32_t name_size = 0, arch_size = 0;
  uint64_t cubin_size = 0, ptx_size = 0, source_size = 0;
  uint64_t checksum = 0;
  // Saturates instead of wrapping, so that absurd sizes cannot add up to the file's length.
  uint64_t file_size() const {
    uint64_t total = kEntryHeaderSize + name_size + arch_size;
    for (uint64_t s : {cubin_size, ptx_size, source_size}) {
      total = s > UINT64_MAX - total ? UINT64_MAX : total + s;
    }
    return total;
  }
};

std::optional<Header> read_header(std::string_view bytes, std::string* problem) {
  if (bytes.size() < kEntryHeaderSize) {
    *problem = fmt::format("truncated: {} bytes, shorter than the {}-byte header", bytes.size(),
                           kEntryHeaderSize);
    return std::nullopt;
  }
  if (bytes.substr(0, 4) != kEntryMagic) {
    *problem = "bad magic (not a fusejit cache entry)";
    return std::nullopt;
  }
  Header h;
  h.version = static_cast<uint32_t>(get_le(bytes, 4, 4));
  if (h.version != kFormatVersion) {
    *problem = fmt::format("stale: format version {} (this fusejit reads version {})", h.version,
                           kFormatVersion);
    return std::nullopt;
  }
  h.key.digest.hi = get_le(bytes, 8, 8);
  h.key.digest.lo = get_le(bytes, 16, 8);
  h.name_size = static_cast<uint32_t>(get_le(bytes, 24, 4));
  h.arch_size = static_cast<uint32_t>(get_le(bytes, 28, 4));
  h.cubin_size = get_le(bytes, 32, 8);
  h.ptx_size = get_le(bytes, 40, 8);
  h.source_size = get_le(bytes, 48, 8);
  h.checksum = get_le(bytes, kChecksumOffset, 8);
  if (h.name_size == 0 || h.name_size > kMaxNameSize || h.arch_size == 0 ||
      h.arch_size > kMaxArchSize) {
    *problem = fmt::format("bad header: name size {}, arch size {}", h.name_size, h.arch_size);
    return std::nullopt;
  }
  if (h.file_size() > kMaxEntryBytes) {
    *problem = fmt::format("bad header: it says {} bytes, more than any entry ({})", h.file_size(),
                           kMaxEntryBytes);
    return std::nullopt;
  }
  return h;
}

}  // namespace

uint64_t entry_checksum(std::string_view bytes) {
  ir::Hash64 h;
  h.update(bytes.substr(0, kChecksumOffset));
  if (bytes.size() > kEntryHeaderSize) h.update(bytes.substr(kEntryHeaderSize));
  return h.digest();
}

std::string encode_entry(const KernelKey& key, const Entry& e) {
  std::string out;
  out.reserve(kEntryHeaderSize + e.name.size() + e.arch.size() + e.cubin.size() + e.ptx.size() +
              e.source.size());
  out.append(kEntryMagic);
  put_u32(out, kFormatVersion);
  put_u64(out, key.digest.hi);
  put_u64(out, key.digest.lo);
  put_u32(out, static_cast<uint32_t>(e.name.size()));
  put_u32(out, static_cast<uint32_t>(e.arch.size()));
  put_u64(out, e.cubin.size());
  put_u64(out, e.ptx.size());
  put_u64(out, e.source.size());
  put_u64(out, 0);  // the checksum, filled in below
  for (const std::string* part : {&e.name, &e.arch, &e.cubin, &e.ptx, &e.source}) {
    out.append(*part);
  }
  const uint64_t sum = entry_checksum(out);
  for (int i = 0; i < 8; ++i)
    out[kChecksumOffset + static_cast<size_t>(i)] = static_cast<char>((sum >> (8 * i)) & 0xff);
  return out;
}

std::optional<Entry> decode_entry(std::string_view bytes, const KernelKey& expected,
                                  std::string* problem) {
  const std::optional<Header> h = read_header(bytes, problem);
  if (!h) return std::nullopt;
  if (!(h->key == expected)) {
    *problem = fmt::format("key mismatch: the file is named {} but holds {}", expected.hex(),
                           h->key.hex());
    return std::nullopt;
  }
  if (h->file_size() != bytes.size()) {
    *problem = fmt::format("{}: {} bytes, the header says {}",
                           bytes.size() < h->file_size() ? "truncated" : "size mismatch",
                           bytes.size(), h->file_size());
    return std::nullopt;
  }
  const uint64_t sum = entry_checksum(bytes);
  if (sum != h->checksum) {
    *problem = fmt::format(
        "payload checksum mismatch (the checksum covers the header too; stored {:016x}, "
        "computed {:016x})",
        h->checksum, sum);
    return std::nullopt;
  }
  Entry e;
  size_t at = kEntryHeaderSize;
  auto take = [&](std::string& field, uint64_t size) {
    field.assign(bytes.substr(at, static_cast<size_t>(size)));
    at += static_cast<size_t>(size);
  };
  take(e.name, h->name_size);
  take(e.arch, h->arch_size);
  take(e.cubin, h->cubin_size);
  take(e.ptx, h->ptx_size);
  take(e.source, h->source_size);
  return e;
}

std::optional<EntrySummary> peek_entry(std::string_view prefix, std::string* problem) {
  const std::optional<Header> h = read_header(prefix, problem);
  if (!h) return std::nullopt;
  if (prefix.size() < kEntryHeaderSize + h->name_size + h->arch_size) {
    *problem = "truncated inside the name or arch";
    return std::nullopt;
  }
  EntrySummary s;
  s.name = std::string(prefix.substr(kEntryHeaderSize, h->name_size));
  s.arch = std::string(prefix.substr(kEntryHeaderSize + h->name_size, h->arch_size));
  s.file_size = h->file_size();
  return s;
}

}  // namespace fusejit::cache
