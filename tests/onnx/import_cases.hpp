#pragma once
// Shared by tests/onnx: the import cases that a helper script (onnx_models.py,
// onnx_seq_models.py) lists in a manifest, "NAME BATCH SPEC" per line (SPEC "-" for a
// file Starling must refuse), with NAME.onnx, NAME.x.bin and NAME.ref.bin beside it.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "starling/onnx/onnx.hpp"

namespace starling::onnxtest {

struct ImportCase {
  std::string name;
  int batch = 0;
  std::string spec;
};

// The cases of the manifest that must import.
inline std::vector<ImportCase> importCases(const std::filesystem::path& manifest) {
  std::ifstream in(manifest);
  std::vector<ImportCase> out;
  ImportCase c;
  while (in >> c.name >> c.batch >> c.spec)
    if (c.spec != "-") out.push_back(c);
  return out;
}

inline std::vector<float> floatFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<float> v(std::filesystem::file_size(p) / sizeof(float));
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

struct Imported {
  model::Model model;
  std::vector<float> x;    // the case's inputs
  std::vector<float> ref;  // what forward() must return
  float diff = 0;          // the largest |forward(x) - ref|
};

// Imports the case, checks its spec and weights, and runs its inputs forward.
inline Imported importCase(const std::filesystem::path& dir, const ImportCase& c) {
  auto imported = onnxio::importOnnx((dir / (c.name + ".onnx")).string());
  REQUIRE(imported);
  CHECK(imported->spec == c.spec);
  auto m = model::Model::fromSpec(imported->spec);
  REQUIRE(m);
  REQUIRE(m->setParams(imported->params));
  Imported r{std::move(m).value(), floatFile(dir / (c.name + ".x.bin")), floatFile(dir / (c.name + ".ref.bin")), 0};
  REQUIRE(r.x.size() == static_cast<std::size_t>(c.batch) * r.model.inputDim());
  auto got = r.model.forward(r.x.data(), c.batch);
  REQUIRE(got.size() == r.ref.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    r.diff = std::max(r.diff, std::abs(got[i] - r.ref[i]));
  return r;
}

}  // namespace starling::onnxtest
