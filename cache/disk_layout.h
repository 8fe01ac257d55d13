// cache/disk_layout: how the disk store names its files, shared by the store and its
// maintenance commands (private to the cache layer).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace fusejit::cache::layout {

inline constexpr std::string_view kLockExtension = ".lock";
inline constexpr std::string_view kTempMarker = ".fjk.tmp-";

enum class FileKind { entry, temp, lock, other };

// Shard directories are named by two lowercase hex digits.
inline bool is_shard_name(std::string_view name) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  return name.size() == 2 && hex(name[0]) && hex(name[1]);
}

// What a file in a shard directory is, by its name alone (an entry: "<32 hex>.fjk").
FileKind classify(std::string_view file_name);

// Reads a whole file. false with `why` set when it cannot; `missing` says whether it was absent.
bool read_file(const std::filesystem::path& path, std::string& bytes, std::string* why,
               bool* missing = nullptr);

}  // namespace fusejit::cache::layout
