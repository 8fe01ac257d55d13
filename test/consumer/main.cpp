// Built against the installed package: proves the public headers and fusejit::fusejit suffice.
#include <cstdio>

#include <fusejit/fusejit.h>

int main() {
  fusejit::Context ctx(fusejit::Options::parse({{"FUSEJIT_LOG", "error"}}));
  auto x = ctx.from_vector(std::vector<double>{-1, 2, -3, 4}, {2, 2});
  auto y = fusejit::relu(x) * 2.0;
  const std::vector<double> out = y.to_host();
  const bool ok = out == std::vector<double>{0, 4, 0, 8};
  std::printf("consumer: fusejit %s %s\n", FUSEJIT_VERSION_STRING, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
