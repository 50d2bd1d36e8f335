// addScaledPart: a tensor added part by part gives the bits addScaled() gives
// (the engine's shards add an update by parts on several threads).

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "starling/compression/compressed.hpp"
#include "starling/compression/compressor.hpp"

#include "vectors.hpp"

using namespace starling;
using namespace starling::compression;
using namespace starling::compression::test;

TEST_CASE("addScaledPart: every split of every encoding adds the same bits as addScaled", "[add-scaled]") {
  constexpr std::size_t kCount = 1000;  // not a multiple of sign's blocks
  const std::string name = GENERATE(as<std::string>{}, "identity", "fp16", "topk", "randk", "sign", "qsgd");
  CAPTURE(name);
  auto compressor = makeCompressor(name);
  REQUIRE(compressor.isOk());
  Compressed c;
  CompressParams params;
  params.density = 0.1;
  params.seed = 3;
  REQUIRE((*compressor)->compress(gaussian(kCount, 9), params, c).isOk());
  const std::vector<float> start = flat(kCount, 4);
  std::vector<float> whole = start;
  REQUIRE(addScaled(c, 0.37f, whole).isOk());
  REQUIRE(std::memcmp(whole.data(), start.data(), kCount * sizeof(float)) != 0);  // it added something
  const std::size_t n = c.selected();
  for (std::size_t parts : {1u, 2u, 3u, 7u, 64u}) {
    CAPTURE(parts);
    std::vector<float> byParts = start;
    // Parts in reverse order: each element once, whatever the order.
    for (std::size_t p = parts; p-- > 0;)
      REQUIRE(addScaledPart(c, 0.37f, n * p / parts, n * (p + 1) / parts, byParts).isOk());
    REQUIRE(std::memcmp(whole.data(), byParts.data(), kCount * sizeof(float)) == 0);
  }
}

TEST_CASE("addScaledPart: refuses a part past the tensor, the wrong output size and indices out of range",
          "[add-scaled]") {
  Compressed c;
  c.encoding = Encoding::kTopK;
  c.count = 10;
  c.indices = {1, 4, 12};
  c.values = {1.0f, 2.0f, 3.0f};
  std::vector<float> out(10, 0.0f);
  REQUIRE(addScaledPart(c, 1.0f, 0, 2, out).isOk());  // the part's indices are in range
  CHECK(out[1] == 1.0f);
  CHECK(out[4] == 2.0f);
  const Status past = addScaledPart(c, 1.0f, 2, 4, out);
  REQUIRE_FALSE(past.isOk());
  CHECK_THAT(past.message(), Catch::Contains("part [2, 4) of a tensor of 3"));
  CHECK_THAT(addScaledPart(c, 1.0f, 2, 3, out).message(), Catch::Contains("index out of range"));
  CHECK_FALSE(addScaledPart(c, 1.0f, 2, 1, out).isOk());
  std::vector<float> small(9, 0.0f);
  CHECK_FALSE(addScaledPart(c, 1.0f, 0, 1, small).isOk());
}
