#include <zip.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "starling/data/load.hpp"

#include "temp_files.hpp"

using namespace starling;
using namespace starling::data;
using starling::data::test::row;
using starling::data::test::TempDir;

namespace {

template <typename T>
std::string raw(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// An .npy file as numpy.save writes it: magic, version, header length, a dict padded
// with spaces to a multiple of 64 bytes and ended by '\n', then the data.
std::string npy(const std::string& descr, const std::vector<std::size_t>& shape, const std::string& data, int major = 1,
                bool fortran = false) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i)
    dict += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
  dict += "), }";
  const std::size_t prefix = 8 + (major == 1 ? 2 : 4);
  while ((prefix + dict.size() + 1) % 64 != 0)
    dict.push_back(' ');
  dict.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  for (std::size_t i = 0; i < prefix - 8; ++i)
    out.push_back(static_cast<char>((dict.size() >> (8 * i)) & 0xff));
  return out + dict + data;
}

// An .npz archive (stored, as numpy.savez writes it) of name -> .npy contents.
std::string writeNpz(const TempDir& dir, const std::string& name,
                     const std::vector<std::pair<std::string, std::string>>& arrays) {
  const std::string path = dir.file(name);
  int error = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  REQUIRE(z != nullptr);
  for (const auto& [array, contents] : arrays) {
    zip_source_t* src = zip_source_buffer(z, contents.data(), contents.size(), 0);
    REQUIRE(src != nullptr);
    REQUIRE(zip_file_add(z, (array + ".npy").c_str(), src, ZIP_FL_OVERWRITE) >= 0);
  }
  REQUIRE(zip_close(z) == 0);
  return path;
}

Status refusal(const std::string& path, const DataOptions& options = {}) {
  auto d = loadData(path, options);
  REQUIRE_FALSE(d.isOk());
  return d.status();
}

}  // namespace

TEST_CASE("NPY: a 2-D array whose last column is the label", "[npy]") {
  TempDir dir;
  SECTION("float64, the label last") {
    auto d = loadData(dir.write("a.npy", npy("<f8", {2, 3}, raw<double>({0.5, 1.5, 2, -1, 4, 0}))));
    REQUIRE(d.isOk());
    CHECK(d->size() == 2);
    CHECK(d->featureDim() == 2);
    CHECK(d->numClasses() == 3);
    CHECK(d->label(1) == 0);
    CHECK(row(*d, 0) == std::vector<float>{0.5f, 1.5f});
  }
  SECTION("every integer dtype and versions 2.0 and 3.0") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"|i1", raw<int8_t>({5, -2, 1})},  {"|u1", raw<uint8_t>({5, 200, 1})}, {"<i2", raw<int16_t>({5, -2, 1})},
        {"<u2", raw<uint16_t>({5, 2, 1})}, {"<i4", raw<int32_t>({5, -2, 1})},  {"<u4", raw<uint32_t>({5, 2, 1})},
        {"<i8", raw<int64_t>({5, -2, 1})}, {"<u8", raw<uint64_t>({5, 2, 1})},  {"<f4", raw<float>({5.0f, -2.0f, 1.0f})},
    };
    for (int major : {1, 2, 3}) {
      for (const auto& [descr, data] : cases) {
        INFO(descr << " version " << major);
        auto d = loadData(dir.write("b.npy", npy(descr, {1, 3}, data, major)));
        REQUIRE(d.isOk());
        CHECK(d->label(0) == 1);
        CHECK(row(*d, 0)[0] == 5.0f);
      }
    }
  }
  SECTION("the label in another column, for regression") {
    DataOptions o;
    o.label = "0";
    o.task = TaskKind::kRegression;
    auto d = loadData(dir.write("c.npy", npy("<f4", {2, 2}, raw<float>({0.25f, 7, -1.5f, 8}))), o);
    REQUIRE(d.isOk());
    CHECK(d->isRegression());
    CHECK(d->target(0) == 0.25f);
    CHECK(d->target(1) == -1.5f);
    CHECK(row(*d, 1) == std::vector<float>{8.0f});
  }
  SECTION("binary -1/+1") {
    DataOptions o;
    o.task = TaskKind::kBinary;
    auto d = loadData(dir.write("d.npy", npy("<i8", {2, 2}, raw<int64_t>({3, -1, 4, 1}))), o);
    REQUIRE(d.isOk());
    CHECK(d->numClasses() == 2);
    CHECK(d->label(0) == 0);
    CHECK(d->label(1) == 1);
  }
}

TEST_CASE("malformed NPY files are refused with the place", "[npy]") {
  TempDir dir;
  const auto file = [&](const std::string& contents) { return dir.write("bad.npy", contents); };
  const auto refused = [&](const std::string& contents, const std::string& what, DataOptions o = {}) {
    Status s = refusal(file(contents), o);
    CHECK_THAT(s.message(), Catch::StartsWith(dir.file("bad.npy") + ": ") && Catch::Contains(what));
    return s.code();
  };
  refused("not numpy at all", "magic");
  refused(npy("<f8", {2, 3}, raw<double>({1, 2, 3, 4, 5})), "takes 48 bytes, the file holds 40");
  refused(npy("<f8", {2, 3}, raw<double>({1, 2, 3, 4, 5, 6, 7})), "the file holds 56");
  refused(npy("<f8", {6}, raw<double>({1, 2, 3, 4, 5, 6})), "expected a 2-D array");
  refused(npy("<f8", {1, 2, 1}, raw<double>({1, 2})), "expected a 2-D array");
  CHECK(refused(npy(">f8", {1, 2}, raw<double>({1, 2})), "big-endian") == StatusCode::kUnsupported);
  CHECK(refused(npy("<c8", {1, 2}, raw<double>({1, 2})), "dtype '<c8'") == StatusCode::kUnsupported);
  CHECK(refused(npy("<f8", {1, 2}, raw<double>({1, 2}), 1, true), "Fortran order") == StatusCode::kUnsupported);
  refused(npy("<f8", {2, 2}, raw<double>({1, 0, 2, 0.5})), "row 1 column 1: label 0.5");
  refused(npy("<f4", {2, 2}, raw<float>({1, 0, NAN, 0})), "row 1 column 0: feature nan is not a finite number");
  refused(npy("<f8", {1, 2}, raw<double>({1e300, 0})), "not a finite number");
  DataOptions o;
  o.task = TaskKind::kBinary;
  refused(npy("<i4", {2, 2}, raw<int32_t>({1, 0, 2, 3})), "row 1 column 1: label '3'", o);
  o = {};
  o.label = "2";
  CHECK(refused(npy("<f8", {1, 2}, raw<double>({1, 0})), "label column '2'", o) == StatusCode::kInvalidArgument);
  std::string truncatedHeader = npy("<f8", {1, 2}, raw<double>({1, 0}));
  refused(truncatedHeader.substr(0, 30), "header announces");
  std::string badDict = npy("<f8", {1, 2}, raw<double>({1, 0}));
  badDict.replace(badDict.find("'shape'"), 7, "'shapf'");
  refused(badDict, "unknown key 'shapf'");
}

TEST_CASE("NPZ: features and labels arrays from a zip archive", "[npz]") {
  TempDir dir;
  const std::string x = npy("<f4", {2, 2, 2}, raw<float>({1, 2, 3, 4, 5, 6, 7, 8}));
  SECTION("'x' and 'y', N-D features keep their shape") {
    auto d = loadData(writeNpz(dir, "a.npz", {{"x", x}, {"y", npy("<i8", {2}, raw<int64_t>({1, 4}))}}));
    REQUIRE(d.isOk());
    CHECK(d->size() == 2);
    CHECK(d->featureDim() == 4);
    CHECK(d->shape() == std::vector<int>{2, 2});
    CHECK(d->numClasses() == 5);
    CHECK(row(*d, 1) == std::vector<float>{5, 6, 7, 8});
  }
  SECTION("'features' and 'labels', and a named labels array") {
    auto d = loadData(writeNpz(dir, "b.npz", {{"features", x}, {"labels", npy("|u1", {2}, raw<uint8_t>({0, 1}))}}));
    REQUIRE(d.isOk());
    CHECK(d->label(1) == 1);
    DataOptions o;
    o.label = "price";
    o.task = TaskKind::kRegression;
    d = loadData(writeNpz(dir, "c.npz", {{"X", x}, {"price", npy("<f8", {2}, raw<double>({9.5, -1}))}}), o);
    REQUIRE(d.isOk());
    CHECK(d->target(0) == 9.5f);
  }
  SECTION("errors name the array and the element") {
    Status s = refusal(writeNpz(dir, "d.npz", {{"x", x}}));
    CHECK_THAT(s.message(), Catch::Contains("no labels array") && Catch::Contains("'x.npy'"));
    s = refusal(writeNpz(dir, "e.npz", {{"y", x}}));
    CHECK_THAT(s.message(), Catch::Contains("no features array"));
    s = refusal(writeNpz(dir, "f.npz", {{"x", x}, {"y", npy("<i8", {3}, raw<int64_t>({1, 2, 3}))}}));
    CHECK_THAT(s.message(), Catch::Contains("array 'y'") && Catch::Contains("found (3,)"));
    s = refusal(writeNpz(dir, "g.npz", {{"x", x}, {"y", npy("<i8", {2}, raw<int64_t>({1, -2}))}}));
    CHECK_THAT(s.message(), Catch::Contains("array 'y' element 1: label '-2'"));
    s = refusal(writeNpz(
        dir, "h.npz",
        {{"x", npy("<f8", {2, 1}, raw<double>({1, INFINITY}))}, {"y", npy("<i8", {2}, raw<int64_t>({1, 2}))}}));
    CHECK_THAT(s.message(), Catch::Contains("array 'x' example 1 feature 0: inf"));
    s = refusal(writeNpz(dir, "i.npz", {{"x", "garbage"}, {"y", npy("<i8", {2}, raw<int64_t>({1, 2}))}}));
    CHECK_THAT(s.message(), Catch::Contains("array 'x': not a NumPy .npy file"));
    s = refusal(dir.write("j.npz", "not a zip"));
    CHECK_THAT(s.message(), Catch::Contains("not a readable .npz"));
    CHECK(refusal(dir.file("absent.npz")).code() == StatusCode::kNotFound);
  }
}

TEST_CASE("files written by NumPy itself load", "[npy][npz][numpy]") {
  TempDir dir;
  const std::string script =
      "import sys, numpy as np\n"
      "d = sys.argv[1]\n"
      "a = np.array([[0.5, 1.5, 2], [-1, 4, 0], [3, 3, 1]], dtype=np.float64)\n"
      "np.save(d + '/a.npy', a)\n"
      "x = np.arange(24, dtype=np.int64).reshape(3, 2, 4)\n"
      "np.savez_compressed(d + '/b.npz', x=x, y=np.array([2, 0, 1], dtype=np.int64))\n"
      "np.savez(d + '/c.npz', features=np.full((2, 3), 0.25, dtype=np.float32),\n"
      "         labels=np.array([1.5, -2.0], dtype=np.float64))\n"
      "np.save(d + '/f.npy', np.asfortranarray(a))\n"
      "np.save(d + '/e.npy', np.array([[1, -1], [2, 1]], dtype='>i4'))\n"
      "np.save(d + '/i.npy', np.array([[7, 1], [8, 0]], dtype=np.int32))\n";
  dir.write("gen.py", script);
  const std::string command = "/usr/bin/python3 " + dir.file("gen.py") + " " + dir.file("") + " 2>/dev/null";
  if (std::system(command.c_str()) != 0) {
    WARN("numpy (/usr/bin/python3 with numpy) is missing: the NumPy-written files are not checked");
    return;
  }
  auto a = loadData(dir.file("a.npy"));
  REQUIRE(a.isOk());
  CHECK(a->size() == 3);
  CHECK(row(*a, 1) == std::vector<float>{-1, 4});
  CHECK(a->label(0) == 2);

  auto b = loadData(dir.file("b.npz"));  // deflated
  REQUIRE(b.isOk());
  CHECK(b->size() == 3);
  CHECK(b->featureDim() == 8);
  CHECK(b->shape() == std::vector<int>{2, 4});
  CHECK(row(*b, 2) == std::vector<float>{16, 17, 18, 19, 20, 21, 22, 23});
  CHECK(b->label(0) == 2);

  DataOptions o;
  o.task = TaskKind::kRegression;
  auto c = loadData(dir.file("c.npz"), o);
  REQUIRE(c.isOk());
  CHECK(c->target(0) == 1.5f);
  CHECK(row(*c, 1) == std::vector<float>{0.25f, 0.25f, 0.25f});

  auto f = loadData(dir.file("f.npy"));
  REQUIRE_FALSE(f.isOk());
  CHECK_THAT(f.status().message(), Catch::Contains("Fortran order"));
  auto e = loadData(dir.file("e.npy"));
  REQUIRE_FALSE(e.isOk());
  CHECK_THAT(e.status().message(), Catch::Contains("big-endian"));
  auto i = loadData(dir.file("i.npy"));
  REQUIRE(i.isOk());
  CHECK(row(*i, 1) == std::vector<float>{8});
}
