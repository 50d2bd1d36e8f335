#include <catch2/catch.hpp>
#include <vector>

#include "starling/data/loaders.hpp"

#include "temp_files.hpp"

using namespace starling;
using namespace starling::data;
using starling::data::test::row;
using starling::data::test::TempDir;

namespace {

std::vector<int32_t> labelsOf(const Dataset& d) {
  return {d.labels().begin(), d.labels().end()};
}

}  // namespace

TEST_CASE("LIBSVM lines load sparse, with 1-based indices", "[libsvm]") {
  TempDir dir;
  auto d = loadLibsvm(dir.write("a.svm", "1 1:0.5 3:2\n# a comment line\n0 2:-1  # trailing comment\n2\n"));
  REQUIRE(d.isOk());
  CHECK(d->isSparse());
  CHECK(d->nnz() == 3);
  CHECK(d->size() == 3);
  SparseBatch batch;
  std::vector<uint32_t> all = {0, 1, 2};
  d->gatherSparse(all, batch);
  CHECK(batch.offsets == std::vector<uint64_t>{0, 2, 3, 3});
  CHECK(batch.indices == std::vector<uint32_t>{0, 2, 1});
  CHECK(batch.values == std::vector<float>{0.5f, 2.0f, -1.0f});
  CHECK(d->featureDim() == 3);
  CHECK(row(*d, 0) == std::vector<float>{0.5f, 0.0f, 2.0f});
  CHECK(row(*d, 1) == std::vector<float>{0.0f, -1.0f, 0.0f});
  CHECK(row(*d, 2) == std::vector<float>{0.0f, 0.0f, 0.0f});

  SECTION("an explicit featureDim pads the rows") {
    LibsvmOptions options;
    options.featureDim = 5;
    auto wide = loadLibsvm(dir.file("a.svm"), options);
    REQUIRE(wide.isOk());
    CHECK(wide->featureDim() == 5);
    CHECK(row(*wide, 0) == std::vector<float>{0.5f, 0.0f, 2.0f, 0.0f, 0.0f});
  }
}

TEST_CASE("LIBSVM labels map to classes by a documented rule", "[libsvm]") {
  TempDir dir;
  auto load = [&](const std::string& text, LibsvmLabels mode = LibsvmLabels::kAuto, int numClasses = 0) {
    LibsvmOptions options;
    options.labels = mode;
    options.numClasses = numClasses;
    return loadLibsvm(dir.write("l.svm", text), options);
  };
  SECTION("-1/+1 become 0/1") {
    auto d = load("+1 1:1\n-1 1:2\n1 1:3\n");
    REQUIRE(d.isOk());
    CHECK(labelsOf(*d) == std::vector<int32_t>{1, 0, 1});
    CHECK(d->numClasses() == 2);
  }
  SECTION("a 0 makes labels 0-based") {
    auto d = load("0 1:1\n2 1:2\n1 1:3\n");
    REQUIRE(d.isOk());
    CHECK(labelsOf(*d) == std::vector<int32_t>{0, 2, 1});
    CHECK(d->numClasses() == 3);
  }
  SECTION("otherwise labels are 1-based") {
    auto d = load("1 1:1\n3 1:2\n");
    REQUIRE(d.isOk());
    CHECK(labelsOf(*d) == std::vector<int32_t>{0, 2});
    CHECK(d->numClasses() == 3);
  }
  SECTION("an explicit mode overrides the guess") {
    auto d = load("1 1:1\n3 1:2\n", LibsvmLabels::kZeroBased);
    REQUIRE(d.isOk());
    CHECK(labelsOf(*d) == std::vector<int32_t>{1, 3});
  }
  SECTION("labels that do not fit the chosen mode are refused at their line") {
    auto signedOnly = load("1 1:1\n-1 1:1\n2 1:1\n", LibsvmLabels::kSigned);
    REQUIRE_FALSE(signedOnly.isOk());
    CHECK_THAT(signedOnly.status().message(), Catch::Contains("l.svm:3: "));
    auto oneBased = load("1 1:1\n0 1:1\n", LibsvmLabels::kOneBased);
    REQUIRE_FALSE(oneBased.isOk());
    CHECK_THAT(oneBased.status().message(), Catch::Contains("l.svm:2: label 0"));
    auto tooMany = load("0 1:1\n7 1:1\n2 1:1\n", LibsvmLabels::kAuto, 5);
    REQUIRE_FALSE(tooMany.isOk());
    CHECK_THAT(tooMany.status().message(), Catch::Contains("l.svm:2: label 7"));
  }
}

TEST_CASE("malformed LIBSVM files are refused with the file and the line", "[libsvm]") {
  TempDir dir;
  auto refused = [&](const std::string& contents, const std::string& where, const std::string& what,
                     std::size_t featureDim = 0) {
    const std::string path = dir.write("train.svm", contents);
    LibsvmOptions options;
    options.featureDim = featureDim;
    auto d = loadLibsvm(path, options);
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == StatusCode::kMalformed);
    CHECK_THAT(d.status().message(), Catch::StartsWith(path + where));
    CHECK_THAT(d.status().message(), Catch::Contains(what));
  };
  SECTION("a token without a colon") {
    refused("1 1:2\n1 3\n", ":2: ", "expected index:value, found '3'");
  }
  SECTION("index 0") {
    refused("1 0:2\n", ":1: ", "index '0'");
  }
  SECTION("a negative index") {
    refused("1 -2:2\n", ":1: ", "index '-2'");
  }
  SECTION("indices that do not increase") {
    refused("1 1:1\n\n0 3:1 2:1\n", ":3: ", "index 2 does not increase");
  }
  SECTION("a repeated index") {
    refused("1 2:1 2:1\n", ":1: ", "index 2 does not increase");
  }
  SECTION("an index beyond featureDim") {
    refused("1 1:1\n1 9:1\n", ":2: ", "exceeds featureDim 4", 4);
  }
  SECTION("a value that is not a number") {
    refused("1 1:x\n", ":1: ", "value 'x'");
  }
  SECTION("a label that is not an integer") {
    refused("1 1:1\n0.5 1:1\n", ":2: ", "label '0.5'");
  }
  SECTION("no examples") {
    refused("# only a comment\n", ": ", "no examples");
  }
  SECTION("no features anywhere") {
    refused("1\n0\n", ": ", "no features");
  }
}

// Found by fuzz-libsvm (tests/fuzz/corpus/libsvm/regression-*): a two-line file
// whose index 1888888888 asked for 15 GB of dense floats (out of memory) when the
// loader densified, and files of 18 and 27 bytes that asked for 726 and 705 MB. Kept
// sparse, they take a few bytes per non-zero.
TEST_CASE("a LIBSVM file with a huge index loads sparse in small memory", "[libsvm]") {
  TempDir dir;
  const std::string path = dir.write("huge.svm", "0 1888888888:88\n8\n");
  auto d = loadLibsvm(path);
  REQUIRE(d.isOk());
  CHECK(d->featureDim() == 1888888888);
  CHECK(d->nnz() == 1);
  CHECK(d->memoryBytes() < 100);
  auto slow = loadLibsvm(dir.write("slow.svm", "0 188:888 88208812:8\n\n\n820"));
  REQUIRE(slow.isOk());
  CHECK(slow->featureDim() == 88208812);

  SECTION("an index beyond 2^32 is refused with its line") {
    auto over = loadLibsvm(dir.write("over.svm", "0 1:1\n1 4294967297:1\n"));
    CHECK(over.status().code() == StatusCode::kOutOfRange);
    CHECK_THAT(over.status().message(), Catch::StartsWith(dir.file("over.svm") + ":2: index 4294967297 exceeds"));
    // Index 2^32 is the last a 64-bit target holds; a 32-bit one stops at 2^32 - 1.
    auto edge = loadLibsvm(dir.write("edge.svm", "0 4294967296:1\n"));
    if constexpr (sizeof(std::size_t) >= 8)
      CHECK(edge.isOk());
    else
      CHECK(edge.status().code() == StatusCode::kOutOfRange);
  }
}

TEST_CASE("a LIBSVM file of 10^6 features loads with memory proportional to its non-zeros", "[libsvm]") {
  TempDir dir;
  std::string text;
  const int lines = 2000;
  for (int i = 0; i < lines; ++i)
    text += (i % 2 == 0 ? "1 " : "0 ") + std::to_string(1 + i * 37) + ":0.5 1000000:1\n";
  auto d = loadLibsvm(dir.write("wide.svm", text));
  REQUIRE(d.isOk());
  CHECK(d->isSparse());
  CHECK(d->featureDim() == 1000000);
  CHECK(d->size() == lines);
  CHECK(d->nnz() == 2 * lines);
  // 2 non-zeros of 8 bytes, an offset of 8 and a label of 4 per line: 28 bytes, where
  // dense floats would take 4 MB per line.
  CHECK(d->memoryBytes() <= 28u * lines + 8);
  std::vector<uint32_t> idx = {1};
  SparseBatch b;
  d->gatherSparse(idx, b);
  CHECK(b.indices == std::vector<uint32_t>{37, 999999});
  CHECK(b.values == std::vector<float>{0.5f, 1.0f});
  CHECK(d->label(1) == 0);
  CHECK(d->label(0) == 1);
}

TEST_CASE("LIBSVM lines longer than a read block load whole", "[libsvm]") {
  TempDir dir;
  std::string text = "1";
  const int entries = 200000;  // ~2.5 MB on one line, across the 1 MiB blocks
  for (int i = 1; i <= entries; ++i)
    text += " " + std::to_string(i) + ":1";
  text += "\r\n0 3:2";  // CRLF, and a last line without a newline
  auto d = loadLibsvm(dir.write("long.svm", text));
  REQUIRE(d.isOk());
  CHECK(d->size() == 2);
  CHECK(d->nnz() == entries + 1);
  CHECK(d->featureDim() == entries);
  auto bad = loadLibsvm(dir.write("bad.svm", text + "\n1 2:x\n"));
  CHECK_THAT(bad.status().message(), Catch::StartsWith(dir.file("bad.svm") + ":3: "));
}
