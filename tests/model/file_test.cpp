// Model files: round trips and clear refusals.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "starling/model/model.hpp"
#include "starling/util/checksum.hpp"

using starling::checksum64;
using starling::StatusCode;
using starling::model::Model;

namespace {

std::string tempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("starling-model-test-" + name)).string();
}

std::string readAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void writeAll(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("a saved model loads back identical", "[model][file]") {
  auto m = Model::fromSpec("cnn:1x8x8-c2k3-p2-f5-3");
  REQUIRE(m.isOk());
  m->initialize(9);
  const std::string path = tempPath("roundtrip.bin");
  REQUIRE(m->save(path).isOk());
  auto loaded = Model::load(path);
  REQUIRE(loaded.isOk());
  CHECK(loaded->spec() == m->spec());
  CHECK(checksum64(loaded->params()) == checksum64(m->params()));
  std::filesystem::remove(path);
}

TEST_CASE("damaged model files are refused with a reason", "[model][file]") {
  auto m = Model::fromSpec("mlp:5-4-3");
  REQUIRE(m.isOk());
  m->initialize(2);
  const std::string path = tempPath("damaged.bin");
  REQUIRE(m->save(path).isOk());
  const std::string good = readAll(path);

  SECTION("missing file") {
    auto r = Model::load(tempPath("does-not-exist.bin"));
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == StatusCode::kNotFound);
  }
  SECTION("bad magic") {
    std::string bytes = good;
    bytes[0] = 'X';
    writeAll(path, bytes);
    auto r = Model::load(path);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == StatusCode::kMalformed);
    CHECK_THAT(r.status().message(), Catch::Contains("magic"));
  }
  SECTION("another version") {
    std::string bytes = good;
    bytes[8] = 7;
    writeAll(path, bytes);
    auto r = Model::load(path);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == StatusCode::kUnsupported);
  }
  SECTION("truncated") {
    for (std::size_t keep : {std::size_t{10}, std::size_t{20}, good.size() / 2, good.size() - 1}) {
      writeAll(path, good.substr(0, keep));
      auto r = Model::load(path);
      REQUIRE_FALSE(r.isOk());
      CHECK(r.status().code() == StatusCode::kMalformed);
    }
  }
  SECTION("a flipped parameter bit") {
    std::string bytes = good;
    bytes[bytes.size() - 20] ^= 0x10;
    writeAll(path, bytes);
    auto r = Model::load(path);
    REQUIRE_FALSE(r.isOk());
    CHECK_THAT(r.status().message(), Catch::Contains("checksum"));
  }
  SECTION("trailing bytes") {
    writeAll(path, good + "x");
    auto r = Model::load(path);
    REQUIRE_FALSE(r.isOk());
    CHECK_THAT(r.status().message(), Catch::Contains("trailing"));
  }
  SECTION("a spec that does not parse") {
    std::string bytes = good;
    bytes[16] = '?';  // first byte of the spec
    writeAll(path, bytes);
    auto r = Model::load(path);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == StatusCode::kMalformed);
  }
  std::filesystem::remove(path);
}
