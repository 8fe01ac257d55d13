// templates/arch: the one parser of GPU arch names, and target_for_arch reading through it.
#include "fusejit/error.h"
#include "support/catch.h"
#include "templates/arch.h"
#include "templates/target.h"

using namespace fusejit;
using templates::Arch;
using templates::parse_arch;

TEST_CASE("arch names parse into number, kind and suffix", "[templates][arch]") {
  const Arch sm90 = parse_arch("sm_90");
  CHECK(sm90.number == 90);
  CHECK(sm90.real);
  CHECK(sm90.suffix.empty());
  CHECK(sm90.name() == "sm_90");

  const Arch sm90a = parse_arch("sm_90a");
  CHECK(sm90a.number == 90);
  CHECK(sm90a.real);
  CHECK(sm90a.name() == "sm_90a");
  CHECK(sm90a.sm() == "sm_90");
  CHECK(sm90a.compute() == "compute_90");

  const Arch ptx = parse_arch("compute_120");
  CHECK(ptx.number == 120);
  CHECK_FALSE(ptx.real);
  CHECK(ptx.name() == "compute_120");
  CHECK(ptx.sm() == "sm_120");
  CHECK(parse_arch("compute_100f").name() == "compute_100f");
}

TEST_CASE("a malformed arch name is a usage error naming it and the forms", "[templates][arch]") {
  for (const char* bad : {"gfx90a", "sm90", "sm_", "sm_9", "sm_1000", "sm_09", "sm_90b", "sm_9a0",
                          "compute_", "SM_90", "", "sm_90 "}) {
    INFO(bad);
    REQUIRE_THROWS_AS(parse_arch(bad), UsageError);
    REQUIRE_THROWS_WITH(parse_arch(bad), ContainsSubstring(std::string("unknown GPU arch '") + bad +
                                                           "'; name it sm_NN"));
  }
  REQUIRE_THROWS_WITH(parse_arch("hopper"), ContainsSubstring("or compute_NN for PTX only"));
}

TEST_CASE("target_for_arch takes any arch spelling and refuses old or malformed ones",
          "[templates][arch]") {
  CHECK(templates::target_for_arch("sm_90a").cc == 90);
  CHECK(templates::target_for_arch("compute_86").cc == 86);
  CHECK(templates::target_for_arch("sm_91").cluster_blocks == 8);  // the sm_90 row
  REQUIRE_THROWS_WITH(templates::target_for_arch("sm_60"),
                      ContainsSubstring("older than the oldest"));
  REQUIRE_THROWS_WITH(templates::target_for_arch("volta"),
                      ContainsSubstring("unknown GPU arch 'volta'"));
}
