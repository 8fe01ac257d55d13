// The tests' main: Catch2's own, for v2 and v3 alike.
#if FUSEJIT_CATCH2_V3
#include <catch2/catch_session.hpp>
int main(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
#else
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#endif
