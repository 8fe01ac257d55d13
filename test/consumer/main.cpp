// Built against the installed package, as C++17, through find_package(fusejit) and through
// pkg-config: proves the public headers and libfusejit.so suffice (the embedding API included:
// it needs no CUDA header).
#include <cstdio>

#include <fusejit/fusejit.h>

int main() {
  fusejit::Placement placement;  // C++17: no designated initializers
  placement.device = 0;
  fusejit::Context ctx(fusejit::Options::parse({{"FUSEJIT_LOG", "error"}}), placement);
  auto x = ctx.from_vector(std::vector<double>{-1, 2, -3, 4}, {2, 2});
  auto y = fusejit::relu(x) * 2.0;
  const std::vector<double> out = y.to_host();
  bool ok = out == std::vector<double>{0, 4, 0, 8};
  if (!ctx.has_gpu()) {
    // The Context's memory is host memory here: wrapped in place, computed into.
    std::vector<float> in{1, -2, 3, -4}, result(4);
    auto w = ctx.wrap(in.data(), {4}, fusejit::DType::f32);
    fusejit::relu(w).eval_into(result.data(), result.size() * sizeof(float));
    ok = ok && result == std::vector<float>{1, 0, 3, 0};
  }
  std::printf("consumer: fusejit %s %s\n", FUSEJIT_VERSION_STRING, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
