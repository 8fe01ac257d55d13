// jit/cudnn_api: finding, loading and checking cuDNN; see cudnn_api.h.
#include "jit/libs/cudnn_api.h"

#include <dlfcn.h>
#include <glob.h>

#include <array>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>
#include <nvrtc.h>

#include "fusejit/error.h"

namespace fusejit::jit::cudnn {

namespace {

constexpr const char* kLibrary = "libcudnn.so.9";

// dlerror()'s text, or a fallback when there is none.
std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "no reason given";
}

template <class Fn>
bool resolve(void* lib, Fn*& fn, const char* symbol, std::string& missing) {
  fn = reinterpret_cast<Fn*>(dlsym(lib, symbol));
  if (!fn) missing += missing.empty() ? symbol : fmt::format(", {}", symbol);
  return fn != nullptr;
}

// Every entry point of `lib`, or null and why not.
std::shared_ptr<Api> bind(void* lib, std::string path, std::string& why) {
  auto api = std::make_shared<Api>();
  std::string missing;
  resolve(lib, api->get_version, "cudnnGetVersion", missing);
  resolve(lib, api->get_error_string, "cudnnGetErrorString", missing);
  resolve(lib, api->get_last_error_string, "cudnnGetLastErrorString", missing);
  resolve(lib, api->create, "cudnnCreate", missing);
  resolve(lib, api->destroy, "cudnnDestroy", missing);
  resolve(lib, api->set_stream, "cudnnSetStream", missing);
  resolve(lib, api->create_descriptor, "cudnnBackendCreateDescriptor", missing);
  resolve(lib, api->destroy_descriptor, "cudnnBackendDestroyDescriptor", missing);
  resolve(lib, api->finalize, "cudnnBackendFinalize", missing);
  resolve(lib, api->set_attribute, "cudnnBackendSetAttribute", missing);
  resolve(lib, api->get_attribute, "cudnnBackendGetAttribute", missing);
  resolve(lib, api->execute, "cudnnBackendExecute", missing);
  if (!missing.empty()) {
    why = fmt::format("{}: lacks {}", path, missing);
    return nullptr;
  }
  api->path = std::move(path);
  api->version = api->get_version();
  if (std::string refusal = refuse_version(api->version); !refusal.empty()) {
    why = fmt::format("{}: {}", api->path, refusal);
    return nullptr;
  }
  return api;
}

// Where the linked NVRTC was loaded from: the toolkit's library directory.
std::string nvrtc_directory() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) || !info.dli_fname) return "";
  std::string file = info.dli_fname;
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? "" : file.substr(0, slash);
}

// The candidate files of places 4 and 5 of load_cudnn, in order, existing ones only.
std::vector<std::string> candidate_files() {
  std::vector<std::string> patterns;
  if (std::string dir = nvrtc_directory(); !dir.empty()) patterns.push_back(dir + "/" + kLibrary);
  patterns.push_back(std::string("/usr/local/cuda/lib64/") + kLibrary);
  const std::string wheel = std::string("lib/python3*/site-packages/nvidia/cudnn/lib/") + kLibrary;
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv && *venv) {
    patterns.push_back(fmt::format("{}/{}", venv, wheel));
  }
  patterns.push_back("/opt/*/.venv/" + wheel);
  if (const char* home = std::getenv("HOME"); home && *home) {
    patterns.push_back(fmt::format("{}/.local/{}", home, wheel));
  }
  patterns.push_back(std::string("/usr/local/lib/python3*/dist-packages/nvidia/cudnn/lib/") +
                     kLibrary);
  std::vector<std::string> files;
  for (const std::string& pattern : patterns) {
    glob_t g{};
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        std::string f = g.gl_pathv[i];
        bool seen = false;
        for (const std::string& known : files) seen = seen || known == f;
        if (!seen) files.push_back(std::move(f));
      }
    }
    globfree(&g);
  }
  return files;
}

// dlopens `file` and binds it; on failure appends "file: why" to `tried`.
std::shared_ptr<Api> try_open(const std::string& file, int flags, std::string shown,
                              std::vector<std::string>& tried) {
  void* lib = dlopen(file.c_str(), flags);
  if (!lib) {
    if (!(flags & RTLD_NOLOAD)) tried.push_back(fmt::format("{}: {}", shown, dl_error()));
    return nullptr;
  }
  std::string why;
  auto api = bind(lib, std::move(shown), why);
  if (!api) tried.push_back(why);
  // The library stays loaded even when refused: other code in the process may hold it, and
  // cuDNN's sub-libraries are not known to unload cleanly.
  return api;
}

std::string unavailable(const std::vector<std::string>& tried) {
  std::string text = "cuDNN unavailable:";
  for (const std::string& t : tried) text += fmt::format(" [{}]", t);
  return text + " (set FUSEJIT_CUDNN_PATH to a libcudnn.so.9 of version 9.x, x != 10)";
}

}  // namespace

std::string refuse_version(size_t version) {
  if (version < 90000 || version >= 100000) {
    return fmt::format("version {} is not 9.x (fusejit uses cuDNN 9's graph API)", version);
  }
  if (version == 91000 || version == 91001) {
    return fmt::format(
        "version {} is refused: cuDNN 9.10.0 and 9.10.1 have known bugs in "
        "fp16/bf16 attention; use 9.10.2 or later",
        version);
  }
  return "";
}

std::string Api::version_text() const {
  return fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
}

std::string Api::describe(Status status) const {
  std::array<char, 1024> last{};
  get_last_error_string(last.data(), last.size());
  const char* name = get_error_string(status);
  return fmt::format("{} ({}){}{}", name ? name : "unknown status", status, last[0] ? ": " : "",
                     last.data());
}

void Api::check(Status status, std::string_view call) const {
  if (status == static_cast<Status>(StatusCode::success)) return;
  throw CudaError(fmt::format("{} failed: {}", call, describe(status)), std::string(call), status);
}

void DescriptorDeleter::operator()(Descriptor d) const {
  if (d) api->destroy_descriptor(d);  // a failure here has no one to report to
}

OwnedDescriptor make_descriptor(const Api& api, DescriptorType type) {
  Descriptor d = nullptr;
  api.check(api.create_descriptor(type, &d),
            fmt::format("cudnnBackendCreateDescriptor(type {})", static_cast<int>(type)));
  return OwnedDescriptor(d, DescriptorDeleter{&api});
}

CudnnHandle::CudnnHandle(std::shared_ptr<const Api> api) : api_(std::move(api)) {
  api_->check(api_->create(&handle_), "cudnnCreate");
}

CudnnHandle::~CudnnHandle() {
  if (handle_) api_->destroy(handle_);
}

CudnnLibrary load_cudnn(std::string_view explicit_path) {
  std::vector<std::string> tried;
  const auto found = [](std::shared_ptr<Api> api) { return CudnnLibrary{std::move(api), ""}; };
  if (!explicit_path.empty()) {
    const std::string file(explicit_path);
    if (auto api = try_open(file, RTLD_NOW | RTLD_LOCAL, "FUSEJIT_CUDNN_PATH=" + file, tried)) {
      return found(std::move(api));
    }
    return CudnnLibrary{nullptr, unavailable(tried)};
  }
  if (auto api = try_open(kLibrary, RTLD_NOW | RTLD_NOLOAD, "already loaded", tried)) {
    return found(std::move(api));
  }
  if (auto api = try_open(kLibrary, RTLD_NOW | RTLD_LOCAL, kLibrary, tried)) {
    return found(std::move(api));
  }
  const std::vector<std::string> files = candidate_files();
  for (const std::string& file : files) {
    if (auto api = try_open(file, RTLD_NOW | RTLD_LOCAL, file, tried)) return found(std::move(api));
  }
  if (files.empty()) {
    tried.push_back("no libcudnn.so.9 in the CUDA toolkit's lib64 or in Python's nvidia/cudnn");
  }
  return CudnnLibrary{nullptr, unavailable(tried)};
}

}  // namespace fusejit::jit::cudnn
