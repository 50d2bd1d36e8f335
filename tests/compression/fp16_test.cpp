#include "starling/compression/fp16.hpp"

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

using namespace starling::compression;

TEST_CASE("fp16: every half converts to a float and back unchanged", "[fp16]") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (nan) {
      REQUIRE(std::isnan(halfToFloatSoftware(half)));
      continue;
    }
    const float f = halfToFloatSoftware(half);
    REQUIRE(std::bit_cast<std::uint32_t>(f) == std::bit_cast<std::uint32_t>(halfToFloat(half)));
    REQUIRE(floatToHalfSoftware(f) == half);
    REQUIRE(floatToHalf(f) == half);
  }
}

TEST_CASE("fp16: rounding is to nearest, ties to even", "[fp16]") {
  SECTION("known values") {
    CHECK(floatToHalfSoftware(1.0f) == 0x3c00);
    CHECK(floatToHalfSoftware(-2.0f) == 0xc000);
    CHECK(floatToHalfSoftware(65504.0f) == 0x7bff);
    CHECK(floatToHalfSoftware(65519.0f) == 0x7bff);
    CHECK(floatToHalfSoftware(65520.0f) == 0x7c00);  // the tie rounds to even: infinity
    CHECK(floatToHalfSoftware(0x1p-24f) == 0x0001);  // smallest subnormal
    CHECK(floatToHalfSoftware(0x1p-25f) == 0x0000);  // tie to even: zero
    CHECK(floatToHalfSoftware(0x1.8p-25f) == 0x0001);
    CHECK(floatToHalfSoftware(1.0f + 0x1p-11f) == 0x3c00);  // tie: even mantissa stays
    CHECK(floatToHalfSoftware(1.0f + 0x1.8p-11f) == 0x3c01);
    CHECK(floatToHalfSoftware(std::numeric_limits<float>::infinity()) == 0x7c00);
    CHECK(floatToHalfSoftware(-0.0f) == 0x8000);
  }
  SECTION("the software path agrees with the hardware path on random floats") {
    std::mt19937 rng(7);
    for (int i = 0; i < 1000000; ++i) {
      float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
      if (std::isnan(f)) continue;
      REQUIRE(floatToHalfSoftware(f) == floatToHalf(f));
    }
  }
  SECTION("the result is the nearest half") {
    std::mt19937 rng(8);
    std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
    for (int i = 0; i < 100000; ++i) {
      const float f = dist(rng) * (i % 2 ? 1.0f : 1e-4f);
      const std::uint16_t h = floatToHalfSoftware(f);
      const float back = halfToFloatSoftware(h);
      if (std::isinf(back)) {
        REQUIRE(std::fabs(f) >= 65520.0f);
        continue;
      }
      const float up = halfToFloatSoftware(static_cast<std::uint16_t>(h + 1));
      const float down = halfToFloatSoftware(static_cast<std::uint16_t>(h - 1));
      if ((h & 0x7fff) != 0 && (h & 0x7fff) != 0x7bff) {
        REQUIRE(std::fabs(back - f) <= std::fabs(up - f));
        REQUIRE(std::fabs(back - f) <= std::fabs(down - f));
      }
    }
  }
}

TEST_CASE("fp16: bulk conversion saturates finite values instead of overflowing", "[fp16]") {
  std::vector<float> in = {1e6f, -1e6f, 65504.0f, 65530.0f, 0.5f, -3.25f, 1e-9f, 7.0f, 1e30f, 2.0f};
  std::vector<float> out(in.size());
  roundToHalfSaturating(in, out);
  CHECK(out[0] == 65504.0f);
  CHECK(out[1] == -65504.0f);
  CHECK(out[2] == 65504.0f);
  CHECK(out[3] == 65504.0f);
  CHECK(out[4] == 0.5f);
  CHECK(out[5] == -3.25f);
  CHECK(out[6] == 0.0f);
  CHECK(out[8] == 65504.0f);
  std::vector<std::uint16_t> halves(in.size());
  floatsToHalvesSaturating(in, halves);
  std::vector<float> back(in.size());
  halvesToFloats(halves, back);
  CHECK(back == out);
}
