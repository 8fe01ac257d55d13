// The main example: runs every seed workload through fusejit's lazy tensor API on random data
// at a small size and prints a checksum of each result (failing on a non-finite value). With --write-traces DIR it writes the full-size trace of every workload and
// dtype instead (that is how examples/traces/ is made).
//
//   seed_workloads                     run the workloads at n = 256
//   seed_workloads --size 512          another size
//   seed_workloads --write-traces DIR  write DIR/<workload>_<dtype>.trace at full size
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include <fusejit/fusejit.h>

#include "workloads.h"

namespace fj = fusejit;

namespace {

int write_traces(const std::string& dir) {
  fj::Options options = fj::Options::from_env();
  for (const auto& w : fj::examples::seed_workloads()) {
    for (fj::DType dtype : fj::examples::workload_dtypes(w)) {
      fj::Context ctx(options);
      std::vector<fj::Tensor> in;
      for (const fj::Shape& s : w.input_shapes(fj::examples::full_size(w))) {
        in.push_back(ctx.placeholder(s, dtype));
      }
      const std::string path =
          dir + "/" + w.name + "_" + std::string(fj::dtype_name(dtype)) + ".trace";
      std::ofstream out(path);
      out << ctx.trace_text(w.build(in));
      if (!out) {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        return 1;
      }
      std::printf("wrote %s\n", path.c_str());
    }
  }
  return 0;
}

int run(int64_t n) {
  fj::Context ctx;
  std::printf("fusejit %s: running on the %s\n", FUSEJIT_VERSION_STRING,
              ctx.has_gpu() ? "GPU" : "CPU reference (no GPU found)");
  std::mt19937 rng(42);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const auto& w : fj::examples::seed_workloads()) {
    const int64_t size = w.gemm ? std::min<int64_t>(n, 128) : n;
    for (fj::DType dtype : fj::examples::workload_dtypes(w)) {
      std::vector<fj::Tensor> in;
      for (const fj::Shape& s : w.input_shapes(size)) {
        int64_t count = 1;
        for (int64_t d : s) count *= d;
        std::vector<double> values(static_cast<size_t>(count));
        for (double& v : values) v = normal(rng);
        in.push_back(ctx.from_vector(values, s, dtype));
      }
      std::vector<fj::Tensor> out = w.build(in);
      fj::eval(out);
      double checksum = 0.0;
      bool finite = true;
      for (const fj::Tensor& t : out) {
        for (double v : t.to_host()) {
          checksum += v;
          finite = finite && std::isfinite(v);
        }
      }
      std::printf("%-16s %-5s size %-5lld outputs %zu  checksum %+.6e%s\n", w.name.c_str(),
                  std::string(fj::dtype_name(dtype)).c_str(), static_cast<long long>(size),
                  out.size(), checksum, finite ? "" : "  (non-finite values!)");
      if (!finite) return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int64_t n = 256;
    for (int i = 1; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--write-traces") && i + 1 < argc) return write_traces(argv[++i]);
      if (!std::strcmp(argv[i], "--size") && i + 1 < argc) {
        n = std::stoll(argv[++i]);
      } else {
        std::fprintf(stderr, "usage: %s [--size N] [--write-traces DIR]\n", argv[0]);
        return 2;
      }
    }
    return run(n);
  } catch (const fj::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
