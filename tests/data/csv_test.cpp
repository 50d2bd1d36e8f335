#include <catch2/catch.hpp>
#include <vector>

#include "starling/data/loaders.hpp"

#include "temp_files.hpp"

using namespace starling;
using namespace starling::data;
using starling::data::test::row;
using starling::data::test::TempDir;

namespace {}  // namespace

TEST_CASE("CSV rows load as a label and float features", "[csv]") {
  TempDir dir;
  SECTION("label first, no header") {
    auto d = loadCsv(dir.write("a.csv", "1,0.5,2\n0, -1 ,+3e2\n2,4,5"));
    REQUIRE(d.isOk());
    CHECK(d->size() == 3);
    CHECK(d->featureDim() == 2);
    CHECK(d->numClasses() == 3);
    CHECK(d->label(0) == 1);
    CHECK(row(*d, 1) == std::vector<float>{-1.0f, 300.0f});
    CHECK(d->memoryBytes() == 6 * 4 + 3 * 4);
  }
  SECTION("a header, the label last, CRLF line ends and blank lines") {
    CsvOptions options;
    options.hasHeader = true;
    options.labelColumn = -1;
    options.numClasses = 5;
    auto d = loadCsv(dir.write("b.csv", "x,y,label\r\n1,2,3.0\r\n\r\n4,5,0\r\n"), options);
    REQUIRE(d.isOk());
    CHECK(d->size() == 2);
    CHECK(d->numClasses() == 5);
    CHECK(d->label(0) == 3);
    CHECK(row(*d, 1) == std::vector<float>{4.0f, 5.0f});
  }
  SECTION("another delimiter and a label in the middle") {
    CsvOptions options;
    options.delimiter = ';';
    options.labelColumn = 1;
    auto d = loadCsv(dir.write("c.csv", "7;1;8\n"), options);
    REQUIRE(d.isOk());
    CHECK(d->label(0) == 1);
    CHECK(row(*d, 0) == std::vector<float>{7.0f, 8.0f});
  }
  SECTION("gzipped") {
    const std::string text = "1,2\n0,3\n";
    auto d = loadCsv(dir.writeGzip("d.csv.gz", std::vector<uint8_t>(text.begin(), text.end())));
    REQUIRE(d.isOk());
    CHECK(d->size() == 2);
  }
}

TEST_CASE("malformed CSV files are refused with the file and the line", "[csv]") {
  TempDir dir;
  auto refused = [&](const std::string& contents, const std::string& where, const std::string& what,
                     CsvOptions options = {}) {
    const std::string path = dir.write("train.csv", contents);
    auto d = loadCsv(path, options);
    REQUIRE_FALSE(d.isOk());
    CHECK_THAT(d.status().message(), Catch::StartsWith(path + where));
    CHECK_THAT(d.status().message(), Catch::Contains(what));
  };

  SECTION("a row with a missing field") {
    refused("1,2,3\n4,5,6\n7,8\n", ":3: ", "expected 3 fields, found 2");
  }
  SECTION("a row with an extra field, after a header") {
    CsvOptions options;
    options.hasHeader = true;
    refused("label,a\n1,2\n\n3,4,5\n", ":4: ", "expected 2 fields, found 3", options);
  }
  SECTION("a feature that is not a number") {
    refused("1,2\n0,abc\n", ":2: ", "field 2: 'abc'");
  }
  SECTION("an empty feature") {
    refused("1,2,\n", ":1: ", "field 3");
  }
  SECTION("a non-finite feature") {
    refused("1,nan\n", ":1: ", "not a finite number");
  }
  SECTION("a feature out of float range") {
    refused("1,1e999\n", ":1: ", "field 2");
  }
  SECTION("a negative label") {
    refused("1,2\n-1,3\n", ":2: ", "label '-1'");
  }
  SECTION("a fractional label") {
    refused("1.5,2\n", ":1: ", "label '1.5'");
  }
  SECTION("a label beyond the class count") {
    CsvOptions options;
    options.numClasses = 3;
    refused("1,2\n3,4\n", ":2: ", "label 3 is not below numClasses 3", options);
  }
  SECTION("a row with a label only") {
    refused("\n1\n", ":2: ", "found 1 field");
  }
  SECTION("a label column outside the row") {
    CsvOptions options;
    options.labelColumn = 5;
    refused("1,2\n", ":1: ", "label column 5", options);
  }
  SECTION("no data rows") {
    refused("\n\n", ": ", "no data rows");
  }
  SECTION("a missing file") {
    auto d = loadCsv(dir.file("absent.csv"));
    CHECK(d.status().code() == StatusCode::kNotFound);
    CHECK_THAT(d.status().message(), Catch::Contains("absent.csv"));
  }
}
