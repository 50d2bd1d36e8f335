#include "starling/data/load.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "starling/data/categories.hpp"
#include "starling/data/feature_scaling.hpp"
#include "starling/data/partition.hpp"

#include "temp_files.hpp"

using namespace starling;
using namespace starling::data;
using starling::data::test::idxBytes;
using starling::data::test::ramp;
using starling::data::test::row;
using starling::data::test::TempDir;

namespace {

// The error of loading contents as name; requires that it fails.
Status refusal(const TempDir& dir, const std::string& name, const std::string& contents, const DataOptions& options) {
  auto d = loadData(dir.write(name, contents), options);
  REQUIRE_FALSE(d.isOk());
  return d.status();
}

DataOptions task(TaskKind kind) {
  DataOptions o;
  o.task = kind;
  return o;
}

}  // namespace

TEST_CASE("data formats have names and are detected from the path", "[load]") {
  for (DataFormat f :
       {DataFormat::kAuto, DataFormat::kCsv, DataFormat::kLibsvm, DataFormat::kIdx, DataFormat::kNpy, DataFormat::kNpz})
    CHECK(parseDataFormat(formatName(f)) == f);
  CHECK(parseDataFormat("svm") == DataFormat::kLibsvm);
  CHECK(formatName(DataFormat::kNpz) == "npz");
  CHECK_FALSE(parseDataFormat("parquet").has_value());

  TempDir dir;
  CHECK(*detectFormat(dir.file("")) == DataFormat::kIdx);
  CHECK(*detectFormat("a/b.csv") == DataFormat::kCsv);
  CHECK(*detectFormat("b.CSV.gz") == DataFormat::kCsv);
  CHECK(*detectFormat("b.libsvm") == DataFormat::kLibsvm);
  CHECK(*detectFormat("b.svm.gz") == DataFormat::kLibsvm);
  CHECK(*detectFormat("b.svmlight") == DataFormat::kLibsvm);
  CHECK(*detectFormat("b.npy") == DataFormat::kNpy);
  CHECK(*detectFormat("b.npz") == DataFormat::kNpz);
  auto unknown = detectFormat("data/train.parquet");
  REQUIRE_FALSE(unknown.isOk());
  CHECK(unknown.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(unknown.status().message(), Catch::StartsWith("data/train.parquet: "));
  CHECK_THAT(unknown.status().message(),
             Catch::Contains(".csv") && Catch::Contains(".npz") && Catch::Contains("--data-format"));
  CHECK_FALSE(loadData("data/train.parquet").isOk());
}

TEST_CASE("CSV through loadData: quoting, headers and the label column", "[load][csv]") {
  TempDir dir;
  SECTION("quoted fields, a detected header, the label last by default") {
    auto d = loadData(dir.write("a.csv", "\"x, one\",\"say \"\"y\"\"\",label\n\"1.5\", 2 ,1\n3,\"4\",0\n"));
    REQUIRE(d.isOk());
    CHECK(d->size() == 2);
    CHECK(d->featureDim() == 2);
    CHECK(d->numClasses() == 2);
    CHECK(d->label(0) == 1);
    CHECK(row(*d, 0) == std::vector<float>{1.5f, 2.0f});
  }
  SECTION("the label by header name") {
    DataOptions o;
    o.label = "y";
    auto d = loadData(dir.write("b.csv", "a,y,b\n1,2,3\n4,0,6\n"), o);
    REQUIRE(d.isOk());
    CHECK(d->label(0) == 2);
    CHECK(row(*d, 1) == std::vector<float>{4.0f, 6.0f});
  }
  SECTION("the label by index, without a header") {
    DataOptions o;
    o.label = "0";
    auto d = loadData(dir.write("c.csv", "1,2,3\n0,5,6\n"), o);
    REQUIRE(d.isOk());
    CHECK(d->size() == 2);
    CHECK(d->label(0) == 1);
    CHECK(row(*d, 0) == std::vector<float>{2.0f, 3.0f});
  }
  SECTION("a forced header whose names are numbers") {
    DataOptions o;
    o.header = true;
    auto d = loadData(dir.write("d.csv", "1,2,3\n4,5,1\n"), o);
    REQUIRE(d.isOk());
    CHECK(d->size() == 1);
  }
  SECTION("no header forced: a text first row is then a bad row") {
    DataOptions o;
    o.header = false;
    Status s = refusal(dir, "e.csv", "a,b\n1,2\n", o);
    CHECK_THAT(s.message(), Catch::Contains(":1: "));
  }
  SECTION("a delimiter inside quotes is part of the field") {
    auto d = loadData(dir.write("f.csv", "\"1\",\"2\"\n"));
    REQUIRE(d.isOk());
    Status s = refusal(dir, "g.csv", "f,label\n\"1,5\",1\n", {});
    CHECK_THAT(s.message(), Catch::Contains(":2: ") && Catch::Contains("'1,5'"));
  }
}

TEST_CASE("CSV errors name the line, the column and the counts", "[load][csv]") {
  TempDir dir;
  Status s = refusal(dir, "a.csv", "age,city,label\n30,Paris,1\n", {});
  CHECK(s.code() == StatusCode::kMalformed);
  CHECK_THAT(s.message(), Catch::StartsWith(dir.file("a.csv") + ":2: "));
  CHECK_THAT(s.message(), Catch::Contains("column 'city' is not numeric") && Catch::Contains("'Paris'") &&
                              Catch::Contains("name it with --categorical"));

  s = refusal(dir, "b.csv", "a,b,label\n1,2,3\n\n1,2\n", {});
  CHECK_THAT(s.message(), Catch::StartsWith(dir.file("b.csv") + ":4: "));
  CHECK_THAT(s.message(), Catch::Contains("expected 3 fields, found 2"));

  s = refusal(dir, "c.csv", "a,label\n\"1,0\n", {});
  CHECK_THAT(s.message(), Catch::Contains(":2: ") && Catch::Contains("newlines inside quotes are not supported"));

  s = refusal(dir, "d.csv", "a,label\n\"1\"x,0\n", {});
  CHECK_THAT(s.message(), Catch::Contains(":2: ") && Catch::Contains("closing quote"));

  DataOptions o;
  o.label = "target";
  s = refusal(dir, "e.csv", "a,label\n1,0\n", o);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("'target'") && Catch::Contains("'label'"));

  s = refusal(dir, "f.csv", "a,label\n1,0\ninf,1\n", {});
  CHECK_THAT(s.message(), Catch::Contains(":3: ") && Catch::Contains("not a finite number"));

  s = refusal(dir, "g.csv", "a,label\n1,0\nnan,1\n", {});
  CHECK_THAT(s.message(), Catch::Contains(":3: ") && Catch::Contains("not a finite number"));
}

TEST_CASE("labels follow the task in the text formats", "[load][labels]") {
  TempDir dir;
  SECTION("classification: integral >= 0, numClasses bounds") {
    auto d = loadData(dir.write("a.csv", "f,y\n1,3.0\n2,0\n"));
    REQUIRE(d.isOk());
    CHECK(d->numClasses() == 4);
    CHECK(d->label(0) == 3);
    CHECK_THAT(refusal(dir, "b.csv", "f,y\n1,0\n2,0.5\n", {}).message(),
               Catch::Contains(":3: ") && Catch::Contains("label '0.5'"));
    DataOptions o;
    o.numClasses = 2;
    CHECK_THAT(refusal(dir, "c.csv", "f,y\n1,0\n2,2\n", o).message(),
               Catch::Contains(":3: ") && Catch::Contains("not below numClasses 2"));
  }
  SECTION("binary: 0/1 and -1/+1 map to classes 0 and 1") {
    auto d = loadData(dir.write("a.csv", "f,y\n1,-1\n2,+1\n3,1.0\n"), task(TaskKind::kBinary));
    REQUIRE(d.isOk());
    CHECK(d->numClasses() == 2);
    CHECK(std::vector<int32_t>(d->labels().begin(), d->labels().end()) == std::vector<int32_t>{0, 1, 1});
    d = loadData(dir.write("b.csv", "f,y\n1,0\n2,1\n"), task(TaskKind::kBinary));
    REQUIRE(d.isOk());
    CHECK(d->label(0) == 0);
    CHECK_THAT(refusal(dir, "c.csv", "f,y\n1,0\n2,2\n", task(TaskKind::kBinary)).message(),
               Catch::Contains(":3: ") && Catch::Contains("label '2'") && Catch::Contains("binary"));
    CHECK_THAT(refusal(dir, "d.csv", "f,y\n1,0\n2,1\n3,-1\n", task(TaskKind::kBinary)).message(),
               Catch::Contains(":4: ") && Catch::Contains("mixes"));
    DataOptions o = task(TaskKind::kBinary);
    o.numClasses = 3;
    CHECK(refusal(dir, "e.csv", "f,y\n1,0\n", o).code() == StatusCode::kInvalidArgument);
  }
  SECTION("regression: real targets") {
    auto d = loadData(dir.write("a.csv", "f,y\n1,2.5\n2,-0.125\n"), task(TaskKind::kRegression));
    REQUIRE(d.isOk());
    CHECK(d->isRegression());
    CHECK(d->numClasses() == 1);
    CHECK(d->target(0) == 2.5f);
    CHECK(d->target(1) == -0.125f);
    CHECK_THAT(refusal(dir, "b.csv", "f,y\n1,2\n2,nan\n", task(TaskKind::kRegression)).message(),
               Catch::Contains(":3: ") && Catch::Contains("label 'nan'"));
  }
  SECTION("LIBSVM: binary -1/+1 and 0/1, regression reals, kept sparse") {
    auto d = loadData(dir.write("a.svm", "-1 1:0.5\n+1 3:2 # comment\n"), task(TaskKind::kBinary));
    REQUIRE(d.isOk());
    CHECK(d->featureDim() == 3);
    CHECK(d->label(0) == 0);
    CHECK(d->label(1) == 1);
    CHECK(d->isSparse());
    CHECK(row(*d, 1) == std::vector<float>{0.0f, 0.0f, 2.0f});
    d = loadData(dir.write("b.libsvm", "0 1:1\n1 2:1\n"), task(TaskKind::kBinary));
    REQUIRE(d.isOk());
    CHECK(d->label(1) == 1);
    CHECK_THAT(refusal(dir, "c.svm", "1 1:1\n2 1:1\n", task(TaskKind::kBinary)).message(),
               Catch::Contains(":2: ") && Catch::Contains("label '2'"));
    d = loadData(dir.write("d.svm", "0.75 1:1\n-3.5 2:1\n"), task(TaskKind::kRegression));
    REQUIRE(d.isOk());
    CHECK(d->isRegression());
    CHECK(d->target(1) == -3.5f);
    CHECK(d->isSparse());
    // Classification keeps LibsvmLabels::kAuto: 1-based labels without a 0.
    d = loadData(dir.write("e.svm", "1 1:1\n3 1:1\n"));
    REQUIRE(d.isOk());
    CHECK(d->numClasses() == 3);
    CHECK(d->label(1) == 2);
    DataOptions o;
    o.featureDim = 2;
    CHECK_THAT(refusal(dir, "f.svm", "1 3:1\n", o).message(), Catch::Contains("exceeds featureDim 2"));
    // A huge index no longer densifies: two non-zeros, whatever the width.
    d = loadData(dir.write("g.svm", "1 1:1 2000000000:1\n"));
    REQUIRE(d.isOk());
    CHECK(d->featureDim() == 2000000000);
    CHECK(d->nnz() == 2);
  }
}

TEST_CASE("an IDX directory loads the Fashion-MNIST layout for classification only", "[load][idx]") {
  TempDir dir;
  dir.write("train-images-idx3-ubyte", idxBytes({2, 28, 28}, ramp(2 * 784)));
  dir.write("train-labels-idx1-ubyte", idxBytes({2}, {3, 9}));
  dir.writeGzip("t10k-images-idx3-ubyte.gz", idxBytes({1, 28, 28}, ramp(784)));
  dir.writeGzip("t10k-labels-idx1-ubyte.gz", idxBytes({1}, {4}));
  const std::string path = dir.file("");
  auto train = loadData(path);
  REQUIRE(train.isOk());
  CHECK(train->size() == 2);
  CHECK(train->numClasses() == 10);
  CHECK(train->label(1) == 9);
  DataOptions o;
  o.test = true;
  auto test = loadData(path, o);
  REQUIRE(test.isOk());
  CHECK(test->size() == 1);
  CHECK(test->label(0) == 4);

  auto binary = loadData(path, task(TaskKind::kBinary));
  REQUIRE_FALSE(binary.isOk());
  CHECK(binary.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(binary.status().message(), Catch::Contains("binary"));
  o = {};
  o.format = DataFormat::kIdx;
  auto notDir = loadData(dir.write("x.csv", "1,2\n"), o);
  REQUIRE_FALSE(notDir.isOk());
  CHECK_THAT(notDir.status().message(), Catch::Contains("not a directory"));
}

TEST_CASE("--data-format overrides the extension", "[load]") {
  TempDir dir;
  DataOptions o;
  o.format = DataFormat::kCsv;
  auto d = loadData(dir.write("train.txt", "1,0\n2,1\n"), o);
  REQUIRE(d.isOk());
  CHECK(d->size() == 2);
  o.format = DataFormat::kLibsvm;
  d = loadData(dir.write("train.data", "1 1:2\n"), o);
  REQUIRE(d.isOk());
  CHECK(d->featureDim() == 1);
}

TEST_CASE("a CSV group column is not a feature but each example's group", "[load][csv][groups]") {
  TempDir dir;
  const std::string path = dir.write("users.csv",
                                     "user,x,y,label\n"
                                     "ann,1,2,0\n"
                                     "bob,3,4,1\n"
                                     "ann,5,6,1\n"
                                     "\"c, d\",7,8,0\n");
  DataOptions options;
  options.groupColumn = "user";
  auto d = loadData(path, options);
  REQUIRE(d.isOk());
  CHECK(d->featureDim() == 2);
  CHECK(d->groups().size() == 4);
  CHECK(std::vector<uint32_t>(d->groups().begin(), d->groups().end()) == std::vector<uint32_t>{0, 1, 0, 2});
  std::vector<float> row(2);
  const uint32_t third = 2;
  d->gather({&third, 1}, row);
  CHECK(row == std::vector<float>{5, 6});
  // A subset keeps its examples' groups.
  const std::vector<uint32_t> pick = {3, 1};
  const Dataset sub = d->subset(pick);
  CHECK(std::vector<uint32_t>(sub.groups().begin(), sub.groups().end()) == std::vector<uint32_t>{2, 1});

  // by-column: whole groups per client, largest first to the emptiest client.
  auto parts = partitionDataset(*d, 2, "by-column:user", 1);
  REQUIRE(parts.isOk());
  CHECK((*parts)[0] == std::vector<uint32_t>{0, 2});  // ann's two
  CHECK((*parts)[1] == std::vector<uint32_t>{1, 3});  // bob, then "c, d"

  options.groupColumn = "device";
  CHECK_THAT(refusal(dir, "users2.csv", "user,x,label\nann,1,0\n", options).message(),
             Catch::Contains("group column 'device' is not a column name"));
  options.groupColumn = "user";
  CHECK_THAT(refusal(dir, "users3.libsvm", "1 1:2\n", options).message(),
             Catch::Contains("users3.libsvm:1: expected the group 'user:VALUE' after the label"));
  CHECK_THAT(refusal(dir, "users4.npy", "", options).message(), Catch::Contains("needs a CSV or LIBSVM file"));
  DataOptions plain;
  auto noGroups = loadData(path.substr(0, path.size()), plain);
  CHECK_FALSE(noGroups.isOk());  // "ann" is not a number: without the group column it is a feature
  auto refused = partitionDataset(*d, 2, "by-column:", 1);
  CHECK_FALSE(refused.isOk());
}

TEST_CASE("a LIBSVM group is the token NAME:VALUE after the label", "[load][libsvm][groups]") {
  TempDir dir;
  const std::string path = dir.write("mail.libsvm",
                                     "+1 sender:a.example 1:1 3:2\n"
                                     "-1 sender:b.example 2:1\n"
                                     "# a comment line\n"
                                     "+1 sender:a.example 3:1\n");
  DataOptions options;
  options.groupColumn = "sender";
  options.task = TaskKind::kBinary;
  auto d = loadData(path, options);
  REQUIRE(d.isOk());
  CHECK(d->featureDim() == 3);
  CHECK(std::vector<uint32_t>(d->groups().begin(), d->groups().end()) == std::vector<uint32_t>{0, 1, 0});
  auto parts = partitionDataset(*d, 2, "by-column:sender", 1);
  REQUIRE(parts.isOk());
  CHECK((*parts)[0] == std::vector<uint32_t>{0, 2});
  CHECK((*parts)[1] == std::vector<uint32_t>{1});
  // Classification labels too, and SVMlight's qid.
  options.task = TaskKind::kClassification;
  options.groupColumn = "qid";
  auto q = loadData(dir.write("rank.svm", "1 qid:7 1:1\n2 qid:7 1:2\n1 qid:9 2:1\n"), options);
  REQUIRE(q.isOk());
  CHECK(std::vector<uint32_t>(q->groups().begin(), q->groups().end()) == std::vector<uint32_t>{0, 0, 1});
  CHECK_THAT(refusal(dir, "bad.svm", "1 qid:7 1:1\n2 1:2\n", options).message(),
             Catch::Contains("bad.svm:2: expected the group 'qid:VALUE' after the label") && Catch::Contains("'1:2'"));
  CHECK_THAT(refusal(dir, "empty.svm", "1 qid: 1:1\n", options).message(), Catch::Contains("empty.svm:1:"));
}

TEST_CASE("CSV categorical columns are one-hot over hashed buckets", "[load][csv][categorical]") {
  TempDir dir;
  const std::string path = dir.write("shops.csv",
                                     "city,size,browser,label\n"
                                     "Paris,1.5,firefox,0\n"
                                     "Oslo,2,chrome,1\n"
                                     "Paris,3,\"chrome\",1\n");
  DataOptions options;
  options.categorical = {"city", "browser"};
  options.categoricalBuckets = 8;
  auto d = loadData(path, options);
  REQUIRE(d.isOk());
  REQUIRE(d->featureDim() == 8 + 1 + 8);
  std::vector<float> rows(3 * 17);
  const std::vector<uint32_t> all = {0, 1, 2};
  d->gather(all, rows);
  auto row = [&](int r) { return std::vector<float>(rows.begin() + r * 17, rows.begin() + (r + 1) * 17); };
  for (int r = 0; r < 3; ++r) {
    const auto x = row(r);
    CHECK(std::count(x.begin(), x.begin() + 8, 1.0f) == 1);  // one city slot
    CHECK(std::count(x.begin() + 9, x.end(), 1.0f) == 1);    // one browser slot
  }
  CHECK(row(0)[8] == 1.5f);
  // The same value gets the same slot, in every row and every file.
  const auto r0 = row(0), r1 = row(1), r2 = row(2);
  CHECK(std::vector<float>(r0.begin(), r0.begin() + 8) == std::vector<float>(r2.begin(), r2.begin() + 8));
  CHECK(std::vector<float>(r1.begin() + 9, r1.end()) == std::vector<float>(r2.begin() + 9, r2.end()));
  // FNV-1a of "Paris", computed here: the slot never moves between builds or machines.
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : std::string("Paris")) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  CHECK(row(0)[h % 8] == 1.0f);

  options.categorical = {"colour"};
  CHECK_THAT(refusal(dir, "shops2.csv", "city,size,label\nParis,1,0\n", options).message(),
             Catch::Contains("categorical column 'colour' is not a column name"));
  options.categorical = {"label"};
  CHECK_THAT(refusal(dir, "shops3.csv", "city,size,label\nParis,1,0\n", options).message(),
             Catch::Contains("the label column cannot be categorical"));
}

TEST_CASE("CSV categorical columns are one-hot over an agreed vocabulary plus an other slot",
          "[load][csv][categorical]") {
  TempDir dir;
  const std::string path = dir.write("shops.csv",
                                     "city,size,label\n"
                                     "Paris,1.5,0\n"
                                     "Oslo,2,1\n"
                                     "Lima,3,1\n"
                                     "\"Paris\",4,0\n");
  DataOptions options;
  options.categorical = {"city"};
  options.categoricalBuckets = 4;
  options.categoricalVocabulary["city"] = {"Bergen", "Oslo", "Paris"};  // sorted; Lima is not in it
  auto d = loadData(path, options);
  REQUIRE(d.isOk());
  REQUIRE(d->featureDim() == 4 + 1);  // the width does not depend on the vocabulary
  std::vector<float> rows(4 * 5);
  d->gather(std::vector<uint32_t>{0, 1, 2, 3}, rows);
  CHECK(rows == std::vector<float>{0, 0, 1, 0, 1.5f,  // Paris: slot 2
                                   0, 1, 0, 0, 2,     // Oslo: slot 1
                                   0, 0, 0, 1, 3,     // Lima: the other slot (the last)
                                   0, 0, 1, 0, 4});
  // The values stay with the data, so the encoding can be redone and counted.
  CHECK(categoryCounts(*d) == CategoryCounts{{"city", {{"Lima", 1}, {"Oslo", 1}, {"Paris", 2}}}});
  SECTION("an empty vocabulary puts every value in the other slot") {
    options.categoricalVocabulary["city"] = {};
    auto e = loadData(path, options);
    REQUIRE(e.isOk());
    REQUIRE(e->featureDim() == 5);
    std::vector<float> first(5);
    e->gather(std::vector<uint32_t>{0}, first);
    CHECK(first == std::vector<float>{0, 0, 0, 1, 1.5f});
  }
  SECTION("re-encoding the hashed data gives the same rows as loading with the vocabulary") {
    options.categoricalVocabulary.clear();
    auto hashed = loadData(path, options);
    REQUIRE(hashed.isOk());
    auto recoded = recodeCategories(*hashed, {{"city", {"Bergen", "Oslo", "Paris"}}});
    REQUIRE(recoded.isOk());
    std::vector<float> again(4 * 5);
    recoded->gather(std::vector<uint32_t>{0, 1, 2, 3}, again);
    CHECK(again == rows);
    // A subset keeps each example's value; concatenating parts merges their values.
    const Dataset part = hashed->subset(std::vector<uint32_t>{2, 1});
    CHECK(categoryCounts(part) == CategoryCounts{{"city", {{"Lima", 1}, {"Oslo", 1}}}});
    const std::vector<Dataset> parts{part, hashed->subset(std::vector<uint32_t>{0, 3})};
    auto joined = Dataset::concat(parts);
    REQUIRE(joined.isOk());
    CHECK(categoryCounts(*joined) == categoryCounts(*hashed));
    auto joinedRecoded = recodeCategories(*joined, {{"city", {"Bergen", "Oslo", "Paris"}}});
    REQUIRE(joinedRecoded.isOk());
    std::vector<float> j(4 * 5);
    joinedRecoded->gather(std::vector<uint32_t>{0, 1, 2, 3}, j);
    CHECK(std::vector<float>(j.begin(), j.begin() + 5) == std::vector<float>(rows.begin() + 10, rows.begin() + 15));
    // One-hot indicators are not scaled: their sums are 0, the numeric column's are real.
    const FeatureSums sums = featureSums(*hashed);
    CHECK(sums.sum == std::vector<double>{0, 0, 0, 0, 10.5});
    CHECK(sums.sumSquares == std::vector<double>{0, 0, 0, 0, 1.5 * 1.5 + 4 + 9 + 16});
  }
  SECTION("the vocabulary must cover exactly the categorical columns, sorted, within the slots") {
    options.categoricalVocabulary["size"] = {"1"};
    CHECK_THAT(refusal(dir, "a.csv", "city,size,label\nParis,1,0\n", options).message(),
               Catch::Contains("the vocabulary names column 'size', not a categorical column"));
    options.categoricalVocabulary.erase("size");
    options.categoricalVocabulary["city"] = {"Paris", "Oslo"};
    CHECK_THAT(refusal(dir, "b.csv", "city,size,label\nParis,1,0\n", options).message(),
               Catch::Contains("the vocabulary of column 'city' is not sorted and distinct"));
    options.categoricalVocabulary["city"] = {"A", "B", "C", "D"};
    CHECK_THAT(refusal(dir, "d.csv", "city,size,label\nParis,1,0\n", options).message(),
               Catch::Contains("the vocabulary of column 'city' has 4 values; 4 slots hold at most 3"));
    options.categorical = {"city", "size"};
    options.categoricalVocabulary["city"] = {"Oslo"};
    CHECK_THAT(refusal(dir, "c.csv", "city,size,label\nParis,1,0\n", options).message(),
               Catch::Contains("categorical column 'size' has no vocabulary"));
  }
}
