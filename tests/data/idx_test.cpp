#include <catch2/catch.hpp>
#include <filesystem>
#include <vector>

#include "starling/data/loaders.hpp"

#include "temp_files.hpp"

using namespace starling;
using namespace starling::data;
using starling::data::test::idxBytes;
using starling::data::test::ramp;
using starling::data::test::TempDir;

TEST_CASE("IDX files load as bytes, plain or gzipped", "[idx]") {
  TempDir dir;
  // Three 2x3 images holding bytes 0..17, labels 4, 0, 9.
  const auto images = idxBytes({3, 2, 3}, ramp(18));
  const auto labels = idxBytes({3}, {4, 0, 9});

  auto check = [](const Result<Dataset>& d) {
    REQUIRE(d.isOk());
    CHECK(d->size() == 3);
    CHECK(d->featureDim() == 6);
    CHECK(d->shape() == std::vector<int>{1, 2, 3});
    CHECK(d->numClasses() == 10);  // largest label + 1
    CHECK(d->label(0) == 4);
    CHECK(d->label(2) == 9);
    CHECK(d->memoryBytes() == 18 + 3 * 4);
    std::vector<float> out(6);
    d->gather(std::vector<uint32_t>{2}, out);
    CHECK(out[0] == Approx(12.0f / 255.0f));
    CHECK(out[5] == Approx(17.0f / 255.0f));
  };
  SECTION("plain") {
    check(loadIdx(dir.write("img", images), dir.write("lbl", labels)));
  }
  SECTION("gzipped, whatever the name") {
    check(loadIdx(dir.writeGzip("img.gz", images), dir.writeGzip("lbl", labels)));
  }
  SECTION("an explicit class count") {
    auto d = loadIdx(dir.write("img", images), dir.write("lbl", labels), 12);
    REQUIRE(d.isOk());
    CHECK(d->numClasses() == 12);
  }
  SECTION("other than three dimensions: the shape is the item's dimensions") {
    auto d = loadIdx(dir.write("img", idxBytes({3, 6}, ramp(18))), dir.write("lbl", labels));
    REQUIRE(d.isOk());
    CHECK(d->shape() == std::vector<int>{6});
  }
}

TEST_CASE("malformed IDX files are refused with the file and the byte offset", "[idx]") {
  TempDir dir;
  const std::string goodImages = dir.write("good-images", idxBytes({3, 2, 3}, ramp(18)));
  const std::string goodLabels = dir.write("good-labels", idxBytes({3}, {1, 2, 3}));

  auto refusedImages = [&](const std::vector<uint8_t>& bytes, StatusCode code, const std::string& where) {
    const std::string path = dir.write("bad-images", bytes);
    auto d = loadIdx(path, goodLabels);
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == code);
    CHECK_THAT(d.status().message(), Catch::StartsWith(path + ": offset " + where + ": "));
    return d.status().message();
  };

  SECTION("an empty file") {
    refusedImages({}, StatusCode::kMalformed, "0");
  }
  SECTION("a file cut inside the magic number") {
    refusedImages({0, 0}, StatusCode::kMalformed, "2");
  }
  SECTION("a magic number that is not IDX") {
    refusedImages({0x1f, 0x00, 0x08, 0x03}, StatusCode::kMalformed, "0");
  }
  SECTION("an element type other than unsigned byte") {
    auto message = refusedImages(idxBytes({3, 2, 3}, ramp(18), 0x0D), StatusCode::kUnsupported, "2");
    CHECK_THAT(message, Catch::Contains("float"));
  }
  SECTION("an unknown element type") {
    refusedImages(idxBytes({3}, ramp(3), 0x42), StatusCode::kMalformed, "2");
  }
  SECTION("a header cut inside a dimension") {
    auto bytes = idxBytes({3, 2, 3}, {});
    bytes.resize(10);
    refusedImages(bytes, StatusCode::kMalformed, "10");
  }
  SECTION("a zero image dimension") {
    refusedImages(idxBytes({3, 0, 3}, {}), StatusCode::kMalformed, "8");
  }
  SECTION("data shorter than the header announces") {
    auto message = refusedImages(idxBytes({3, 2, 3}, ramp(17)), StatusCode::kMalformed, "33");
    CHECK_THAT(message, Catch::Contains("17 of the 18"));
  }
  SECTION("a header claiming a huge file") {
    // 3 x (2^32 - 1) x (2^30 - 1) bytes, about 1.4e19: no overflow, just a lie. With a
    // 32-bit size_t (armhf) the product overflows, and is refused as that.
    if constexpr (sizeof(std::size_t) >= 8)
      refusedImages(idxBytes({3, 0xFFFFFFFF, 0x3FFFFFFF}, ramp(100)), StatusCode::kMalformed, "116");
    else
      refusedImages(idxBytes({3, 0xFFFFFFFF, 0x3FFFFFFF}, ramp(100)), StatusCode::kOutOfRange, "4");
  }
  SECTION("dimensions whose product overflows") {
    refusedImages(idxBytes({0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, ramp(4)),
                  StatusCode::kOutOfRange, "4");
  }
  SECTION("data beyond what the header announces") {
    refusedImages(idxBytes({3, 2, 3}, ramp(19)), StatusCode::kMalformed, "34");
  }
  SECTION("labels that do not match the images") {
    const std::string path = dir.write("bad-labels", idxBytes({2}, {1, 2}));
    auto d = loadIdx(goodImages, path);
    REQUIRE_FALSE(d.isOk());
    CHECK_THAT(d.status().message(), Catch::StartsWith(path + ": offset 4: 2 labels for the 3 images"));
  }
  SECTION("a label beyond the class count") {
    const std::string path = dir.write("bad-labels", idxBytes({3}, {1, 12, 3}));
    auto d = loadIdx(goodImages, path, 10);
    REQUIRE_FALSE(d.isOk());
    CHECK_THAT(d.status().message(), Catch::StartsWith(path + ": offset 9: label 12"));
  }
  SECTION("a labels file with two dimensions") {
    const std::string path = dir.write("bad-labels", idxBytes({3, 1}, {1, 2, 3}));
    CHECK_FALSE(loadIdx(goodImages, path).isOk());
  }
  SECTION("a gzip stream cut short") {
    const std::string whole = dir.writeGzip("whole.gz", idxBytes({3, 2, 3}, ramp(18)));
    std::string bytes;
    {
      std::ifstream in(whole, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    const std::string path = dir.write("cut.gz", bytes.substr(0, bytes.size() - 12));
    auto d = loadIdx(path, goodLabels);
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == StatusCode::kMalformed);
    CHECK_THAT(d.status().message(), Catch::StartsWith(path + ": offset "));
  }
  SECTION("a gzip stream missing its checksum trailer") {
    const std::string whole = dir.writeGzip("whole.gz", idxBytes({3, 2, 3}, ramp(18)));
    std::string bytes;
    {
      std::ifstream in(whole, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    const std::string path = dir.write("cut.gz", bytes.substr(0, bytes.size() - 4));
    auto d = loadIdx(path, goodLabels);
    REQUIRE_FALSE(d.isOk());
    CHECK_THAT(d.status().message(), Catch::StartsWith(path + ": offset "));
  }
  SECTION("a corrupt gzip stream") {
    const std::string path =
        dir.write("corrupt.gz", std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage!", 18));
    auto d = loadIdx(path, goodLabels);
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == StatusCode::kMalformed);
    CHECK_THAT(d.status().message(), Catch::StartsWith(path + ": offset 0: "));
  }
  SECTION("a missing file") {
    const std::string path = dir.file("absent");
    auto d = loadIdx(path, goodLabels);
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == StatusCode::kNotFound);
    CHECK_THAT(d.status().message(), Catch::StartsWith(path));
  }
  SECTION("a directory") {
    CHECK(loadIdx(dir.file(""), goodLabels).status().code() == StatusCode::kIo);
  }
}

TEST_CASE("Fashion-MNIST loads from a directory of the four standard files", "[idx][fashion]") {
  TempDir dir;
  SECTION("plain and gzipped names are both found") {
    dir.write("t10k-images-idx3-ubyte", idxBytes({2, 28, 28}, ramp(2 * 784)));
    dir.writeGzip("t10k-labels-idx1-ubyte.gz", idxBytes({2}, {3, 9}));
    auto d = loadFashionMnistSplit(dir.file(""), FashionMnistSplit::kTest);
    REQUIRE(d.isOk());
    CHECK(d->size() == 2);
    CHECK(d->numClasses() == 10);
  }
  SECTION("a missing file is named") {
    auto d = loadFashionMnist(dir.file(""));
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == StatusCode::kNotFound);
    CHECK_THAT(d.status().message(), Catch::Contains("train-images-idx3-ubyte.gz"));
  }
  SECTION("images that are not 28 x 28 are refused") {
    dir.write("t10k-images-idx3-ubyte", idxBytes({2, 2, 3}, ramp(12)));
    dir.write("t10k-labels-idx1-ubyte", idxBytes({2}, {3, 9}));
    CHECK_FALSE(loadFashionMnistSplit(dir.file(""), FashionMnistSplit::kTest).isOk());
  }
}

TEST_CASE("the installed Fashion-MNIST test set has 10,000 examples of 784 bytes in 10 classes", "[idx][fashion]") {
  const std::string dir = defaultFashionMnistDir();
  if (!std::filesystem::exists(dir)) {
    SUCCEED("skipped: " + dir + " does not exist (Debian package dataset-fashion-mnist)");
    return;
  }
  auto d = loadFashionMnistSplit(dir, FashionMnistSplit::kTest);
  REQUIRE(d.isOk());
  CHECK(d->size() == 10000);
  CHECK(d->featureDim() == 784);
  CHECK(d->shape() == std::vector<int>{1, 28, 28});
  CHECK(d->numClasses() == 10);
  CHECK(d->memoryBytes() == 10000 * 784 + 10000 * 4);
  std::vector<int> perClass(10);
  for (int32_t label : d->labels())
    ++perClass.at(static_cast<std::size_t>(label));
  CHECK(perClass == std::vector<int>(10, 1000));  // the test set is balanced
  std::vector<float> image(784);
  d->gather(std::vector<uint32_t>{0}, image);
  float maxPixel = 0.0f;
  for (float v : image)
    maxPixel = std::max(maxPixel, v);
  CHECK(maxPixel > 0.5f);
  CHECK(maxPixel <= 1.0f);
}
