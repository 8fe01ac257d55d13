// Helpers for the cache tests: scratch directories, a logger whose output a test can read,
// small kernels that NVRTC compiles quickly, and running the fusejit binary.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include "fusejit_test_paths.h"
#include "cache/disk_store.h"
#include "support/catch.h"
#include "support/cli_env.h"
#include "templates/kernel.h"

namespace fusejit::test {

namespace fs = std::filesystem;

// A fresh directory under the system's temporary directory, removed afterwards.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            fmt::format("fusejit-cache-test-{}-{}-{}", tag, ::getpid(), counter++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string str(const std::string& sub = "") const {
    return sub.empty() ? path_.string() : (path_ / sub).string();
  }

 private:
  fs::path path_;
};

// A logger that writes "LEVEL: message" lines into a string.
struct CapturedLog {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> logger;
  CapturedLog() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
    logger = std::make_shared<spdlog::logger>("test", sink);
    logger->set_pattern("%l: %v");
    logger->set_level(spdlog::level::debug);
  }
  std::string str() const { return text.str(); }
  int warnings() const {
    const std::string s = text.str();
    int n = 0;
    for (size_t at = s.find("warning: "); at != std::string::npos; at = s.find("warning: ", at + 1))
      ++n;
    return n;
  }
};

// A tiny self-contained kernel; `variant` changes its source (and so its key).
inline templates::Kernel tiny_kernel(int variant) {
  templates::Kernel k;
  k.name = fmt::format("fj_cache_test_{}", variant);
  k.source = fmt::format(
      "extern \"C\" __global__ void {}(float* x) {{\n"
      "  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  x[i] = x[i] * {}.0f + 1.0f;\n"
      "}}\n",
      k.name, variant + 2);
  return k;
}

inline int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

struct CliResult {
  int status = -1;
  std::string out;  // stdout and stderr
};

// Runs the fusejit binary through the shell, in an environment of its own
// (support/cli_env.h): `env` is prepended (VAR=value ...). Warnings are on (FUSEJIT_LOG=warn,
// unless `env` says otherwise): tests read them.
inline CliResult run_cli(const std::string& args, const std::string& env = "") {
  const std::string cmd = testing::isolated_cli_env() + " FUSEJIT_LOG=warn " + env +
                          " " FUSEJIT_CLI " " + args + " 2>&1";
  CliResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Files under `dir` (recursively) whose name contains `part`; 0 when `dir` does not exist.
inline int files_named(const std::string& dir, const std::string& part) {
  int n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    n += it->path().filename().string().find(part) != std::string::npos;
  }
  return n;
}

// Corruptions a test inflicts on an entry file.
inline void truncate_file(const fs::path& path) { fs::resize_file(path, fs::file_size(path) / 2); }
inline void flip_byte(const fs::path& path, size_t from_end = 7) {
  std::string bytes = read_bytes(path);
  bytes[bytes.size() - from_end] ^= 0x5a;
  write_bytes(path, bytes);
}

// Disk store fixtures: a key and an entry per number, a store's config under a TempDir, the
// bytes its .fjk files hold, and made-up ages.
inline cache::KernelKey key_of(int i) {
  cache::KeyIngredients in;
  const std::string source = "kernel source " + std::to_string(i);
  in.source = source;
  in.arch = "sm_90";
  return cache::make_key(in);
}

inline cache::Entry entry_of(int i, const std::string& arch = "sm_90", size_t cubin_bytes = 1000) {
  cache::Entry e;
  e.name = "fj_test_" + std::to_string(i);
  e.arch = arch;
  e.cubin.assign(cubin_bytes, static_cast<char>('a' + i % 26));
  e.ptx = ".target " + arch + "\n// kernel " + std::to_string(i) + "\n";
  e.source = "// source " + std::to_string(i) + "\n";
  return e;
}

inline cache::DiskStore::Config config_for(const TempDir& dir, uint64_t max_bytes = 1ull << 30) {
  cache::DiskStore::Config c;
  c.dir = dir.str("cache");
  c.max_bytes = max_bytes;
  return c;
}

// Bytes of the regular .fjk files under `dir`, symlinks not followed.
inline uint64_t entry_bytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& f : fs::recursive_directory_iterator(dir)) {
    if (f.path().extension() == ".fjk" && f.is_regular_file() && !f.is_symlink()) {
      total += f.file_size();
    }
  }
  return total;
}

inline void set_age(const fs::path& path, std::chrono::seconds age) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - age);
}

}  // namespace fusejit::test
