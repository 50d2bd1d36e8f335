// Partition files:DIR: one data file per client.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "starling/data/load.hpp"
#include "starling/data/partition.hpp"

#include "temp_files.hpp"

using namespace starling;
using namespace starling::data;
using starling::data::test::TempDir;

namespace {

std::string clientsDir(const TempDir& dir) {
  std::filesystem::create_directories(dir.file("clients"));
  return dir.file("clients");
}

}  // namespace

TEST_CASE("files:DIR gives client i the i-th data file by name", "[load][files]") {
  TempDir dir;
  const std::string clients = clientsDir(dir);
  // Written out of order: the order is the file names'.
  dir.write("clients/b.libsvm", "2 1:1 7:2\n1 2:1\n");
  dir.write("clients/a.libsvm", "1 1:3\n");
  const std::string text = "3 3:1\n1 1:1\n2 2:2\n";
  dir.writeGzip("clients/c.libsvm.gz", std::vector<uint8_t>(text.begin(), text.end()));
  dir.write("clients/notes.txt", "not data\n");
  std::filesystem::create_directories(dir.file("clients/sub.csv"));  // a directory: skipped

  CHECK(filesDirOf("files:" + clients) == clients);
  CHECK(filesDirOf("iid").empty());
  auto files = dataFilesIn(clients);
  REQUIRE(files.isOk());
  REQUIRE(files->size() == 3);
  CHECK(std::filesystem::path((*files)[0]).filename() == "a.libsvm");
  CHECK(std::filesystem::path((*files)[2]).filename() == "c.libsvm.gz");

  auto p = loadFilesPartition(clients, 3);
  REQUIRE(p.isOk());
  CHECK(p->all.size() == 6);
  // Inferred counts become the largest: 7 features (b), 3 classes (c).
  CHECK(p->all.featureDim() == 7);
  CHECK(p->all.numClasses() == 3);
  REQUIRE(p->parts.size() == 3);
  CHECK(p->parts[0] == std::vector<uint32_t>{0});
  CHECK(p->parts[1] == std::vector<uint32_t>{1, 2});
  CHECK(p->parts[2] == std::vector<uint32_t>{3, 4, 5});
  // Rows keep their features: b's first row is 1 at feature 0 and 2 at feature 6.
  std::vector<float> row(7);
  const uint32_t second = 1;
  p->all.gather({&second, 1}, row);
  CHECK(row == std::vector<float>{1, 0, 0, 0, 0, 0, 2});
  CHECK(p->all.label(1) == 1);
  CHECK(p->all.label(3) == 2);

  auto mine = clientFileOf(clients, 1, 3);
  REQUIRE(mine.isOk());
  CHECK(std::filesystem::path(*mine).filename() == "b.libsvm");

  SECTION("the number of clients must be the number of files; the error gives both") {
    auto wrong = loadFilesPartition(clients, 4);
    REQUIRE_FALSE(wrong.isOk());
    CHECK_THAT(wrong.status().message(), Catch::Contains("3 data files for 4 clients"));
    CHECK_THAT(clientFileOf(clients, 0, 2).status().message(), Catch::Contains("3 data files for 2 clients"));
  }
  SECTION("a file that disagrees is named") {
    dir.write("clients/d.csv", "1,2,0\n");
    auto mixed = loadFilesPartition(clients, 4);
    REQUIRE_FALSE(mixed.isOk());
    CHECK_THAT(mixed.status().message(), Catch::Contains("d.csv differs from") && Catch::Contains("a.libsvm"));
  }
  SECTION("one data set cannot be cut by files") {
    auto refused = partitionDataset(p->all, 3, "files:" + clients, 1);
    REQUIRE_FALSE(refused.isOk());
    CHECK_THAT(refused.status().message(), Catch::Contains("one file per client"));
  }
}

TEST_CASE("files:DIR refuses dense files of different widths, naming the file", "[load][files]") {
  TempDir dir;
  const std::string clients = clientsDir(dir);
  dir.write("clients/1.csv", "x,y,label\n1,2,0\n3,4,1\n");
  dir.write("clients/2.csv", "x,y,z,label\n1,2,3,0\n");
  auto p = loadFilesPartition(clients, 2);
  REQUIRE_FALSE(p.isOk());
  CHECK_THAT(p.status().message(), Catch::Contains("2.csv differs from") && Catch::Contains("its features: 3, not 2"));
  auto missing = loadFilesPartition(dir.file("nowhere"), 2);
  CHECK(missing.status().code() == StatusCode::kNotFound);
  std::filesystem::create_directories(dir.file("empty"));
  CHECK_THAT(loadFilesPartition(dir.file("empty"), 2).status().message(), Catch::Contains("no data file"));
}

TEST_CASE("a malformed last line leaves no data set, naming path:line", "[load][truncated]") {
  TempDir dir;
  // A file cut off mid-line: everything before is well formed.
  std::string libsvm;
  for (int i = 0; i < 1000; ++i)
    libsvm += std::to_string(i % 2) + " 1:0.5 3:" + std::to_string(i) + "\n";
  const std::string svm = dir.write("cut.libsvm", libsvm + "1 2:0.25 3:");
  auto d = loadData(svm);
  REQUIRE_FALSE(d.isOk());
  CHECK_THAT(d.status().message(), Catch::StartsWith(svm + ":1001: "));
  std::string csv = "a,b,label\n";
  for (int i = 0; i < 1000; ++i)
    csv += std::to_string(i) + ",2," + std::to_string(i % 2) + "\n";
  const std::string c = dir.write("cut.csv", csv + "7,");
  auto e = loadData(c);
  REQUIRE_FALSE(e.isOk());
  CHECK_THAT(e.status().message(), Catch::StartsWith(c + ":1002: "));
}

TEST_CASE("a file larger than the memory limit is refused, naming the limit", "[load][memory]") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 2000; ++i)
    text += std::to_string(i % 2) + " 1:0.5 2:0.25 3:" + std::to_string(i) + "\n";
  const std::string svm = dir.write("big.libsvm", text);
  DataOptions options;
  options.memoryLimitBytes = 10'000;
  SECTION("before reading, from the file's size") {
    auto d = loadData(svm, options);
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == StatusCode::kOutOfRange);
    CHECK_THAT(d.status().message(), Catch::StartsWith(svm + ": the data would take") &&
                                         Catch::Contains("over the limit of 10000 bytes (the limit set;"));
  }
  SECTION("a gzip file by its uncompressed size") {
    const std::string gz = dir.writeGzip("big.libsvm.gz", std::vector<uint8_t>(text.begin(), text.end()));
    CHECK(estimatedDataBytes(gz) == text.size());
    CHECK_THAT(loadData(gz, options).status().message(), Catch::Contains("over the limit"));
  }
  SECTION("while reading, at the line where the rows pass it") {
    // The text (about 40 kB) is within 60 kB, its parsed rows (12 bytes per entry, 16 per
    // row: about 100 kB) are not.
    options.memoryLimitBytes = 60'000;
    auto d = loadData(svm, options);
    REQUIRE_FALSE(d.isOk());
    CHECK_THAT(d.status().message(), Catch::StartsWith(svm + ":") && Catch::Contains("over the limit"));
    std::string csv = "a,b,label\n";
    for (int i = 0; i < 2000; ++i)
      csv += "1,2,0\n";
    options.memoryLimitBytes = 14'000;  // 12 kB of text, 16 kB of floats: passed at row 1750
    const std::string c = dir.write("big.csv", csv);
    auto e = loadData(c, options);
    REQUIRE_FALSE(e.isOk());
    CHECK_THAT(e.status().message(), Catch::StartsWith(c + ":175") && Catch::Contains("over the limit"));
  }
  SECTION("without a limit set, the process's available memory") {
    const MemoryLimit limit = availableMemory();
    CHECK(limit.bytes > 0);
    CHECK(limit.bytes < SIZE_MAX);  // Linux has MemAvailable at least
    CHECK_FALSE(limit.source.empty());
    CHECK(loadData(svm).isOk());
  }
}
