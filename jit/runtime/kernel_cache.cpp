// jit/kernel_cache: memory -> disk -> lock -> compile -> store; see kernel_cache.h.
#include "jit/runtime/kernel_cache.h"

#include <link.h>

#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "cache/file_io.h"
#include "fusejit/error.h"

namespace fusejit::jit {

namespace {

// Finds the GNU build id among the ELF notes of the loaded libnvrtc (not its builtins).
int find_nvrtc_build_id(dl_phdr_info* info, size_t, void* out) {
  const std::string_view name = info->dlpi_name ? info->dlpi_name : "";
  if (name.find("libnvrtc") == std::string_view::npos ||
      name.find("builtins") != std::string_view::npos) {
    return 0;
  }
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const size_t align = ph.p_align == 8 ? 8 : 4;
    auto padded = [align](size_t n) { return (n + align - 1) / align * align; };
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* note_name = p + sizeof(ElfW(Nhdr));
      const char* desc = note_name + padded(note->n_namesz);
      if (desc + note->n_descsz > end) break;
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 &&
          std::memcmp(note_name, "GNU", 4) == 0) {
        std::string& id = *static_cast<std::string*>(out);
        for (size_t b = 0; b < note->n_descsz; ++b) {
          id += fmt::format("{:02x}", static_cast<unsigned char>(desc[b]));
        }
        return 1;
      }
      p = desc + padded(note->n_descsz);
    }
  }
  return 0;
}

CompiledKernel to_compiled(const cache::Entry& e) {
  CompiledKernel c;
  c.name = e.name;
  c.cubin = e.cubin;
  c.ptx = e.ptx;
  return c;
}

}  // namespace

const std::string& compiler_identity() {
  static const std::string identity = [] {
    std::string build_id;
    dl_iterate_phdr(find_nvrtc_build_id, &build_id);
    return fmt::format("nvrtc {} build-id {}", nvrtc_version_string(),
                       build_id.empty() ? "unknown" : build_id);
  }();
  return identity;
}

std::string_view outcome_name(KernelCache::Outcome outcome) {
  switch (outcome) {
    case KernelCache::Outcome::memory_hit:
      return "memory hit";
    case KernelCache::Outcome::disk_hit:
      return "disk hit";
    case KernelCache::Outcome::compiled:
      return "compiled";
  }
  return "?";
}

KernelCache::KernelCache(const Options& options, spdlog::logger& log, Compiler compiler,
                         bool keep_ptx)
    : options_(options),
      log_(log),
      compiler_(std::move(compiler)),
      keep_ptx_(keep_ptx || options.dump.ptx),
      memory_(static_cast<size_t>(options.kernels_max)) {
  if (!compiler_) compiler_ = compile;
  if (options_.cache == CacheMode::on) {
    cache::DiskStore::Config config;
    config.dir = options_.cache_dir;
    if (options_.cache_max_mb)
      config.max_bytes = static_cast<uint64_t>(*options_.cache_max_mb) << 20;
    disk_ = std::make_unique<cache::DiskStore>(config, log_);
  }
}

cache::KernelKey KernelCache::key(const templates::Kernel& k, std::string_view arch) const {
  cache::KeyIngredients in;
  in.source = k.source;
  in.arch = arch;
  in.compiler = compiler_identity();
  in.codegen_version = templates::kCodegenVersion;
  in.compile_flags = compile_flags(arch, {.extra = options_.nvrtc_options});
  return cache::make_key(in);
}

CompiledKernel KernelCache::get(const templates::Kernel& k, std::string_view arch,
                                Outcome* outcome) {
  return *obtain(k, arch, /*wait=*/true, outcome);
}

std::optional<CompiledKernel> KernelCache::try_get(const templates::Kernel& k,
                                                   std::string_view arch, Outcome* outcome) {
  return obtain(k, arch, /*wait=*/false, outcome);
}

Error KernelCache::not_warm(const templates::Kernel& k, std::string_view arch) const {
  const std::string where = disk_
                                ? fmt::format("not in the kernel cache at {}", disk_->config().dir)
                                : fmt::format("not cached (FUSEJIT_CACHE={})",
                                              options_.cache == CacheMode::off ? "off" : "memory");
  return Error(fmt::format(
      "FUSEJIT_REQUIRE_WARM=1, but kernel {} for {} is {} and would be compiled at run time; "
      "warm the cache first: `fusejit warm --arch {} --cache-dir {} TRACES...` over traces "
      "recorded with FUSEJIT_RECORD_DIR",
      k.name, arch, where, arch, options_.cache_dir));
}

CompiledKernel KernelCache::compile_now(const templates::Kernel& k, std::string_view arch) {
  if (options_.require_warm) throw not_warm(k, arch);
  return compiler_(k, arch, CompileOptions{.ptx = keep_ptx_, .extra = options_.nvrtc_options});
}

CompiledKernel KernelCache::from_disk(const templates::Kernel& k, const cache::KernelKey& key,
                                      cache::Entry entry, Outcome* outcome) {
  auto shared = memory_.insert(key, std::make_shared<const cache::Entry>(std::move(entry)));
  CompiledKernel c = to_compiled(*shared);
  ++disk_hits_;
  if (outcome) *outcome = Outcome::disk_hit;
  dump(k, c);
  return c;
}

std::optional<CompiledKernel> KernelCache::obtain(const templates::Kernel& k, std::string_view arch,
                                                  bool wait, Outcome* outcome) {
  if (options_.cache == CacheMode::off) {
    CompiledKernel c = compile_now(k, arch);
    ++compiled_;
    if (outcome) *outcome = Outcome::compiled;
    dump(k, c);
    return c;
  }
  const cache::KernelKey key = this->key(k, arch);
  if (std::shared_ptr<const cache::Entry> e = memory_.find(key); e && complete(*e)) {
    ++memory_hits_;
    if (outcome) *outcome = Outcome::memory_hit;
    return to_compiled(*e);
  }
  if (disk_) {
    if (std::optional<cache::Entry> e = disk_->load(key); e && complete(*e)) {
      return from_disk(k, key, std::move(*e), outcome);
    }
  }
  if (options_.require_warm) throw not_warm(k, arch);  // before any lock is taken

  // Another process may be compiling this very kernel: wait for it (or, with !wait, let the
  // caller do something else first), then look again.
  std::optional<cache::FileLock> lock;
  if (disk_) {
    lock = disk_->lock(key, wait ? cache::FileLock::Wait::yes : cache::FileLock::Wait::no);
    if (!lock) return std::nullopt;
    if (lock->held()) {
      if (std::optional<cache::Entry> e = disk_->load(key); e && complete(*e)) {
        return from_disk(k, key, std::move(*e), outcome);
      }
    }
  }

  CompiledKernel compiled = compile_now(k, arch);
  auto entry = std::make_shared<cache::Entry>();
  entry->name = compiled.name;
  entry->arch = std::string(arch);
  entry->cubin = compiled.cubin;
  entry->ptx = compiled.ptx;
  entry->source = k.source;
  if (disk_) disk_->store(key, *entry);
  if (lock) lock->release();
  memory_.insert(key, entry);
  ++compiled_;
  if (outcome) *outcome = Outcome::compiled;
  log_.debug("compiled {} for {}", k.name, arch);
  dump(k, compiled);
  return compiled;
}

void KernelCache::dump(const templates::Kernel& k, const CompiledKernel& c) {
  if (!options_.dump.cuda && !options_.dump.ptx && !options_.dump.kir) return;
  namespace fs = std::filesystem;
  const fs::path dir(options_.dump_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  auto write = [&](const std::string& file, const std::string& text) {
    const cache::WriteResult written = cache::write_file_atomically(dir / file, text);
    if (!written.ok) {
      std::call_once(dump_warning_, [&] {
        log_.warn("cannot write dumps to {} ({}); FUSEJIT_DUMP_DIR names another directory",
                  dir.string(), ec ? ec.message() : written.why);
      });
    }
  };
  if (options_.dump.cuda) write(k.name + ".cu", k.source);
  if (options_.dump.ptx) write(k.name + ".ptx", c.ptx);
  if (options_.dump.kir && !k.kir.empty()) write(k.name + ".kir", k.kir);
}

}  // namespace fusejit::jit
