#pragma once
// Test helpers: a temporary directory that removes itself, and writers for small
// (possibly malformed) data files.

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "starling/data/dataset.hpp"

namespace starling::data::test {

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("starling-data-test-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }

  std::string write(const std::string& name, const std::string& contents) const {
    std::ofstream out(file(name), std::ios::binary);
    out << contents;
    return file(name);
  }
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    return write(name, std::string(bytes.begin(), bytes.end()));
  }
  std::string writeGzip(const std::string& name, const std::vector<uint8_t>& bytes) const {
    gzFile f = gzopen(file(name).c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return file(name);
  }

 private:
  std::filesystem::path path_;
};

// An IDX file of unsigned bytes: magic, big-endian dims, then data as given.
inline std::vector<uint8_t> idxBytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data,
                                     uint8_t type = 0x08) {
  std::vector<uint8_t> out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    out.push_back(static_cast<uint8_t>(d >> 24));
    out.push_back(static_cast<uint8_t>(d >> 16));
    out.push_back(static_cast<uint8_t>(d >> 8));
    out.push_back(static_cast<uint8_t>(d));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// Bytes 0, 1, 2, ... of the given length.
inline std::vector<uint8_t> ramp(std::size_t n) {
  std::vector<uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<uint8_t>(i);
  return v;
}

// The features of example i of d, as floats.
inline std::vector<float> row(const Dataset& d, uint32_t i) {
  std::vector<float> out(d.featureDim());
  d.gather(std::vector<uint32_t>{i}, out);
  return out;
}

}  // namespace starling::data::test
