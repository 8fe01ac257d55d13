// jit/nvrtc: the NVRTC wrapper; see nvrtc.h.
#include "jit/runtime/nvrtc.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <fmt/format.h>

#include "cache/file_io.h"
#include "fusejit/error.h"
#include "templates/arch.h"

// Every NVRTC call, named in the error it throws.
#define FJ_NVRTC(call) ::fusejit::jit::check_nvrtc((call), #call)

namespace fusejit::jit {

namespace {

// Destroys the program however compile() leaves.
class Program {
 public:
  Program(const std::string& source, const std::string& name) {
    FJ_NVRTC(nvrtcCreateProgram(&prog_, source.c_str(), name.c_str(), 0, nullptr, nullptr));
  }
  ~Program() {
    if (prog_ != nullptr) nvrtcDestroyProgram(&prog_);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return prog_; }

 private:
  nvrtcProgram prog_ = nullptr;
};

std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  FJ_NVRTC(nvrtcGetProgramLogSize(prog, &size));
  std::string log(size, '\0');
  if (size > 0) FJ_NVRTC(nvrtcGetProgramLog(prog, log.data()));
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// Writes the source that failed where a person can find it; returns the path, or a note
// saying why it could not be written.
std::string dump_failed_source(const templates::Kernel& k) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  if (ec) return fmt::format("(not written: no temporary directory: {})", ec.message());
  const std::filesystem::path path = dir / fmt::format("fusejit-failed-{}.cu", k.name);
  const cache::WriteResult written = cache::write_file_atomically(path, k.source);
  if (!written.ok) return fmt::format("(not written: {})", written.why);
  return path.string();
}

}  // namespace

void check_nvrtc(nvrtcResult result, std::string_view call) {
  if (result == NVRTC_SUCCESS) return;
  throw CompileError(fmt::format("NVRTC call {} failed: {} ({})", call,
                                 nvrtcGetErrorString(result), static_cast<int>(result)),
                     "", "");
}

std::vector<std::string> compile_flags(std::string_view arch, const CompileOptions& options) {
  templates::parse_arch(arch);  // throws for a malformed name
  std::vector<std::string> flags = {
      fmt::format("--gpu-architecture={}", arch),
      "-std=c++17",
      "-default-device",
      "-minimal",
      "--prec-div=true",
      "--prec-sqrt=true",
      "--ftz=false",
      "--fmad=true",
  };
  if (options.line_info) flags.push_back("-lineinfo");
  flags.insert(flags.end(), options.extra.begin(), options.extra.end());
  return flags;
}

namespace {

constexpr std::string_view kPtxasVerbose = "--ptxas-options=-v";

// `log` without ptxas's report lines ("ptxas info ...").
std::string without_report(const std::string& log) {
  std::string out;
  size_t from = 0;
  while (from < log.size()) {
    size_t end = log.find('\n', from);
    end = end == std::string::npos ? log.size() : end + 1;
    const std::string_view line(log.data() + from, end - from);
    if (!line.starts_with("ptxas info")) out += line;
    from = end;
  }
  return out;
}

CompiledKernel compile_once(const templates::Kernel& k, std::string_view arch,
                            const CompileOptions& options) {
  const bool real = templates::parse_arch(arch).real;
  const std::vector<std::string> flags = compile_flags(arch, options);
  std::vector<const char*> argv;
  for (const std::string& f : flags) argv.push_back(f.c_str());

  Program prog(k.source, k.name + ".cu");
  const nvrtcResult result =
      nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());
  CompiledKernel out;
  out.name = k.name;
  out.log = program_log(prog.get());
  if (result == NVRTC_ERROR_COMPILATION) {
    const std::string path = dump_failed_source(k);
    throw CompileError(fmt::format("NVRTC could not compile kernel {} for {}; the source is in {}\n{}",
                                   k.name, arch, path, out.log),
                       path.starts_with("(") ? std::string() : path, out.log);
  }
  if (result != NVRTC_SUCCESS) {  // a bad option, out of memory, ...: named, with its string
    std::string joined;
    for (const std::string& f : flags) joined += (joined.empty() ? "" : " ") + f;
    throw CompileError(fmt::format("NVRTC call nvrtcCompileProgram failed for kernel {}: {} ({}); "
                                   "options: {}\n{}",
                                   k.name, nvrtcGetErrorString(result), static_cast<int>(result),
                                   joined, out.log),
                       "", out.log);
  }

  size_t size = 0;
  if (!real || options.ptx) {
    FJ_NVRTC(nvrtcGetPTXSize(prog.get(), &size));
    out.ptx.assign(size, '\0');
    FJ_NVRTC(nvrtcGetPTX(prog.get(), out.ptx.data()));
    while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  }
  if (real) {
    FJ_NVRTC(nvrtcGetCUBINSize(prog.get(), &size));
    out.cubin.assign(size, '\0');
    FJ_NVRTC(nvrtcGetCUBIN(prog.get(), out.cubin.data()));
  }
  return out;
}

}  // namespace

int64_t spill_stores(const std::string& log) {
  static constexpr std::string_view kReport = " bytes spill stores";
  const size_t at = log.find(kReport);
  if (at == std::string::npos) return -1;
  size_t start = at;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(log[start - 1]))) --start;
  return start == at ? -1 : std::stoll(log.substr(start, at - start));
}

CompiledKernel compile(const templates::Kernel& k, std::string_view arch,
                       const CompileOptions& options) {
  if (k.relaxed_min_blocks.empty() || !templates::parse_arch(arch).real) {
    return compile_once(k, arch, options);
  }
  const bool asked =
      std::find(options.extra.begin(), options.extra.end(), kPtxasVerbose) != options.extra.end();
  CompileOptions verbose = options;
  if (!asked) verbose.extra.emplace_back(kPtxasVerbose);
  CompiledKernel out = compile_once(k, arch, verbose);
  for (const int blocks : k.relaxed_min_blocks) {
    if (!spills(out)) break;
    CompileOptions relaxed = verbose;
    relaxed.extra.push_back(fmt::format("-DFJ_MIN_BLOCKS={}", blocks));
    out = compile_once(k, arch, relaxed);
    out.relaxed = true;
    out.relaxed_to = blocks;
  }
  if (!asked) out.log = without_report(out.log);
  return out;
}

int nvrtc_version() {
  int major = 0, minor = 0;
  FJ_NVRTC(nvrtcVersion(&major, &minor));
  return major * 1000 + minor * 10;
}

std::string nvrtc_version_string() {
  int major = 0, minor = 0;
  FJ_NVRTC(nvrtcVersion(&major, &minor));
  return fmt::format("{}.{}", major, minor);
}

std::vector<std::string> supported_archs() {
  int count = 0;
  FJ_NVRTC(nvrtcGetNumSupportedArchs(&count));
  std::vector<int> archs(static_cast<size_t>(count));
  if (count > 0) FJ_NVRTC(nvrtcGetSupportedArchs(archs.data()));
  std::vector<std::string> out;
  for (int a : archs) out.push_back(fmt::format("sm_{}", a));
  return out;
}

}  // namespace fusejit::jit
