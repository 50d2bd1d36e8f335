#pragma once
// The NumPy .npy format (private to data/): a magic string, a version, a header that
// is a Python dict literal ({'descr': '<f8', 'fortran_order': False, 'shape': (3, 4)})
// and the elements in C order. Versions 1.0, 2.0 and 3.0; little-endian (or
// byte-sized) f4, f8, i1, u1, i2, u2, i4, u4, i8 and u8. Stateless; any thread.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::data::detail {

// A parsed array; data points into the bytes given to parseNpy.
struct NpyArray {
  std::string descr;  // as in the header, e.g. "<f8"
  char kind = 'f';    // 'f', 'i' or 'u'
  std::size_t itemSize = 0;
  std::vector<std::size_t> shape;
  std::size_t count = 0;  // product of shape
  const uint8_t* data = nullptr;

  // Element i (in C order) as a double.
  double at(std::size_t i) const;
  // "(3, 4)", as NumPy writes a shape.
  std::string shapeText() const;
};

// Parses a whole .npy file. Errors are kMalformed (kUnsupported for a valid but
// unsupported dtype, byte order or Fortran order) and start with name.
Result<NpyArray> parseNpy(std::span<const uint8_t> bytes, const std::string& name);

}  // namespace starling::data::detail
