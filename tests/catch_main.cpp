// The Catch2 runner's main(), in its own file and built at -O0: Catch2 2.13's
// single header is slow to compile and gains nothing from optimization.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
