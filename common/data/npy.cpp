// NPY parsing and the .npy / .npz readers behind loadData.

#include "npy.hpp"

#include <zip.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string_view>

#include "starling/util/text_cursor.hpp"

#include "file_reader.hpp"
#include "labels.hpp"
#include "load_internal.hpp"
#include "text_parse.hpp"

namespace starling::data::detail {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;

Status malformed(const std::string& name, const std::string& what) {
  return {StatusCode::kMalformed, name + ": " + what};
}

// A reader of the header's dict literal: only the forms np.save writes (strings,
// True/False, tuples of integers).
class HeaderParser : public TextCursor {
 public:
  using TextCursor::TextCursor;

  bool peek(char c) {
    skipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  bool string(std::string& out) {
    skipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) return false;
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) return false;
    out.assign(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return true;
  }
  bool boolean(bool& out) {
    skipSpace();
    for (const auto& [word, value] : {std::pair<std::string_view, bool>{"True", true}, {"False", false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        out = value;
        return true;
      }
    }
    return false;
  }
  bool tuple(std::vector<std::size_t>& out) {
    out.clear();
    if (!take('(')) return false;
    for (;;) {
      if (take(')')) return true;
      skipSpace();
      std::size_t end = pos_;
      while (end < text_.size() && text_[end] >= '0' && text_[end] <= '9')
        ++end;
      const auto value = parseIndex(text_.substr(pos_, end - pos_));
      if (!value) return false;
      out.push_back(*value);
      pos_ = end;
      if (take(')')) return true;
      if (!take(',')) return false;
    }
  }
};

template <typename T>
double load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return static_cast<double>(v);
}

}  // namespace

double NpyArray::at(std::size_t i) const {
  const uint8_t* p = data + i * itemSize;
  switch (kind) {
    case 'f':
      return itemSize == 4 ? load<float>(p) : load<double>(p);
    case 'i':
      switch (itemSize) {
        case 1:
          return load<int8_t>(p);
        case 2:
          return load<int16_t>(p);
        case 4:
          return load<int32_t>(p);
        default:
          return load<int64_t>(p);
      }
    default:
      switch (itemSize) {
        case 1:
          return load<uint8_t>(p);
        case 2:
          return load<uint16_t>(p);
        case 4:
          return load<uint32_t>(p);
        default:
          return load<uint64_t>(p);
      }
  }
}

std::string NpyArray::shapeText() const {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i)
    out += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

Result<NpyArray> parseNpy(std::span<const uint8_t> bytes, const std::string& name) {
  if (bytes.size() < kMagicSize + 2 || std::memcmp(bytes.data(), kMagic, kMagicSize) != 0) {
    return malformed(name, "not a NumPy .npy file (no \\x93NUMPY magic at the start)");
  }
  const int major = bytes[6];
  const int minor = bytes[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    return Status(StatusCode::kUnsupported, name + ": .npy format version " + std::to_string(major) + "." +
                                                std::to_string(minor) + " (this build reads 1.0, 2.0 and 3.0)");
  }
  const std::size_t lengthBytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + lengthBytes) return malformed(name, "file ends inside the header length");
  std::size_t headerLength = 0;
  for (std::size_t i = 0; i < lengthBytes; ++i)
    headerLength |= std::size_t(bytes[8 + i]) << (8 * i);
  const std::size_t dataStart = 8 + lengthBytes + headerLength;
  if (bytes.size() < dataStart) {
    return malformed(name, "the header announces " + std::to_string(headerLength) + " bytes, the file holds " +
                               std::to_string(bytes.size() - 8 - lengthBytes));
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes.data()) + 8 + lengthBytes, headerLength);

  NpyArray array;
  bool fortran = false;
  bool sawDescr = false;
  bool sawOrder = false;
  bool sawShape = false;
  HeaderParser p(header);
  const auto bad = [&](const std::string& what) {
    return malformed(name, "header offset " + std::to_string(p.position()) + ": " + what);
  };
  if (!p.take('{')) return bad("expected '{'");
  while (!p.take('}')) {
    std::string key;
    if (!p.string(key)) return bad("expected a quoted key");
    if (!p.take(':')) return bad("expected ':' after " + detail::quoted(key));
    if (key == "descr") {
      if (!p.string(array.descr)) return bad("'descr' is not a string (structured dtypes are not supported)");
      sawDescr = true;
    } else if (key == "fortran_order") {
      if (!p.boolean(fortran)) return bad("'fortran_order' is not True or False");
      sawOrder = true;
    } else if (key == "shape") {
      if (!p.tuple(array.shape)) return bad("'shape' is not a tuple of integers");
      sawShape = true;
    } else {
      return bad("unknown key " + detail::quoted(key));
    }
    if (!p.take(',') && !p.peek('}')) return bad("expected ',' or '}'");
  }
  if (!sawDescr || !sawOrder || !sawShape) return bad("the header lacks 'descr', 'fortran_order' or 'shape'");

  const std::string& d = array.descr;
  const bool known = d.size() == 3 && (d[1] == 'f' || d[1] == 'i' || d[1] == 'u') &&
                     (d[2] == '1' || d[2] == '2' || d[2] == '4' || d[2] == '8') && !(d[1] == 'f' && d[2] < '4');
  if (!known) {
    return Status(StatusCode::kUnsupported, name + ": dtype " + detail::quoted(d) +
                                                " is not supported (float32/64 and 8- to 64-bit integers are)");
  }
  array.kind = d[1];
  array.itemSize = static_cast<std::size_t>(d[2] - '0');
  if (d[0] == '>' && array.itemSize > 1) {
    return Status(StatusCode::kUnsupported,
                  name + ": dtype " + detail::quoted(d) + " is big-endian; save it as little-endian");
  }
  if (d[0] != '<' && d[0] != '|' && !(d[0] == '>' && array.itemSize == 1)) {
    return Status(StatusCode::kUnsupported, name + ": dtype " + detail::quoted(d) + " has an unknown byte order");
  }
  if (fortran) {
    return Status(StatusCode::kUnsupported,
                  name + ": the array is in Fortran order; save it in C order (numpy.ascontiguousarray)");
  }
  std::size_t count = 1;
  for (std::size_t dim : array.shape) {
    if (dim != 0 && count > std::numeric_limits<std::size_t>::max() / array.itemSize / dim) {
      return Status(StatusCode::kOutOfRange, name + ": shape " + array.shapeText() + " overflows");
    }
    count *= dim;
  }
  array.count = count;
  const std::size_t dataBytes = count * array.itemSize;
  if (bytes.size() - dataStart != dataBytes) {
    return malformed(name, "shape " + array.shapeText() + " of " + d + " takes " + std::to_string(dataBytes) +
                               " bytes, the file holds " + std::to_string(bytes.size() - dataStart) +
                               " after the header");
  }
  array.data = bytes.data() + dataStart;
  return array;
}

namespace {

// Adds features [begin, begin + n) of a as floats; an error names the example and
// feature of the first non-finite one.
Status appendFeatures(const NpyArray& a, std::size_t begin, std::size_t n, std::vector<float>& out,
                      const std::string& where) {
  for (std::size_t j = 0; j < n; ++j) {
    const double v = a.at(begin + j);
    const float f = static_cast<float>(v);
    if (!std::isfinite(f)) {
      return {StatusCode::kMalformed, where + " feature " + std::to_string(j) + ": " + formatNumber(a.at(begin + j)) +
                                          " is not a finite number"};
    }
    out.push_back(f);
  }
  return Status::ok();
}

Result<std::vector<uint8_t>> readWhole(const std::string& path) {
  auto reader = FileReader::open(path);
  if (!reader) return reader.status();
  std::vector<uint8_t> bytes;
  std::size_t got = 0;
  do {
    STARLING_RETURN_IF_ERROR(reader->append(bytes, std::size_t(1) << 20, &got));
  } while (got > 0);
  return bytes;
}

}  // namespace

Result<Dataset> readNpy(const std::string& path, const DataOptions& options) {
  LabelCollector labels(options.task, options.numClasses);
  STARLING_RETURN_IF_ERROR(labels.checkOptions(path));
  auto bytes = readWhole(path);
  if (!bytes) return bytes.status();
  auto array = parseNpy(*bytes, path);
  if (!array) return array.status();
  const NpyArray& a = *array;
  if (a.shape.size() != 2 || a.shape[1] < 2) {
    return Status(StatusCode::kMalformed,
                  path + ": expected a 2-D array (examples, label and features), found shape " + a.shapeText());
  }
  const std::size_t n = a.shape[0];
  const std::size_t cols = a.shape[1];
  if (n == 0) return Status(StatusCode::kMalformed, path + ": no examples (shape " + a.shapeText() + ")");
  std::size_t labelColumn = cols - 1;
  if (!options.label.empty()) {
    const auto index = parseIndex(options.label);
    if (!index || *index >= cols) {
      return Status(StatusCode::kInvalidArgument, path + ": label column " + detail::quoted(options.label) +
                                                      " is not a 0-based column index below " + std::to_string(cols));
    }
    labelColumn = *index;
  }
  std::vector<float> features;
  features.reserve(n * (cols - 1));
  labels.reserve(n);
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t row = r * cols;
    const std::string where = path + ": row " + std::to_string(r);
    if (Status s = labels.addValue(a.at(row + labelColumn)); !s) {
      return Status(StatusCode::kMalformed, where + " column " + std::to_string(labelColumn) + ": " + s.message());
    }
    for (std::size_t c = 0; c < cols; ++c) {
      if (c == labelColumn) continue;
      const float f = static_cast<float>(a.at(row + c));
      if (!std::isfinite(f)) {
        return Status(StatusCode::kMalformed, where + " column " + std::to_string(c) + ": feature " +
                                                  formatNumber(a.at(row + c)) + " is not a finite number");
      }
      features.push_back(f);
    }
  }
  return labels.build(std::move(features), cols - 1, {}, path);
}

namespace {

struct ZipCloser {
  void operator()(zip_t* z) const { zip_discard(z); }
};
struct ZipFileCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

// The bytes of one archive entry; libzip inflates it and checks its CRC.
Result<std::vector<uint8_t>> readEntry(zip_t* archive, zip_int64_t index, const std::string& name) {
  std::unique_ptr<zip_file_t, ZipFileCloser> file(zip_fopen_index(archive, static_cast<zip_uint64_t>(index), 0));
  if (!file) return malformed(name, std::string("cannot open the entry: ") + zip_strerror(archive));
  std::vector<uint8_t> out;
  constexpr std::size_t kChunk = std::size_t(1) << 20;
  for (;;) {
    const std::size_t before = out.size();
    out.resize(before + kChunk);
    const zip_int64_t got = zip_fread(file.get(), out.data() + before, kChunk);
    if (got < 0) return malformed(name, std::string("cannot read the entry: ") + zip_file_strerror(file.get()));
    out.resize(before + static_cast<std::size_t>(got));
    if (got == 0) break;
  }
  return out;
}

}  // namespace

Result<Dataset> readNpz(const std::string& path, const DataOptions& options) {
  LabelCollector labels(options.task, options.numClasses);
  STARLING_RETURN_IF_ERROR(labels.checkOptions(path));
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status(StatusCode::kNotFound, path + ": no such file");
  int error = 0;
  std::unique_ptr<zip_t, ZipCloser> archive(zip_open(path.c_str(), ZIP_RDONLY, &error));
  if (!archive) {
    zip_error_t ze;
    zip_error_init_with_code(&ze, error);
    Status s(error == ZIP_ER_OPEN || error == ZIP_ER_READ ? StatusCode::kIo : StatusCode::kMalformed,
             path + ": not a readable .npz (zip) archive: " + zip_error_strerror(&ze));
    zip_error_fini(&ze);
    return s;
  }
  const auto locate = [&](const std::string& array) {
    return zip_name_locate(archive.get(), (array + ".npy").c_str(), 0);
  };
  const auto entries = [&] {
    std::string names;
    const zip_int64_t n = zip_get_num_entries(archive.get(), 0);
    for (zip_int64_t i = 0; i < n && i < 20; ++i) {
      const char* entry = zip_get_name(archive.get(), static_cast<zip_uint64_t>(i), 0);
      names += (names.empty() ? "" : ", ") + detail::quoted(entry != nullptr ? entry : "?");
    }
    return names.empty() ? std::string("none") : names;
  };

  std::string featuresName;
  zip_int64_t featuresIndex = -1;
  for (const char* candidate : {"x", "X", "features"}) {
    featuresIndex = locate(candidate);
    if (featuresIndex >= 0) {
      featuresName = candidate;
      break;
    }
  }
  if (featuresIndex < 0) {
    return malformed(path, "no features array: expected 'x', 'X' or 'features' (the archive holds " + entries() + ")");
  }
  std::string labelsName = options.label;
  zip_int64_t labelsIndex = -1;
  if (labelsName.empty()) {
    for (const char* candidate : {"y", "labels"}) {
      labelsIndex = locate(candidate);
      if (labelsIndex >= 0) {
        labelsName = candidate;
        break;
      }
    }
  } else {
    labelsIndex = locate(labelsName);
  }
  if (labelsIndex < 0) {
    return malformed(path,
                     "no labels array: expected " +
                         (options.label.empty() ? std::string("'y' or 'labels'") : detail::quoted(options.label)) +
                         " (the archive holds " + entries() + ")");
  }

  const std::string xName = path + ": array " + detail::quoted(featuresName);
  const std::string yName = path + ": array " + detail::quoted(labelsName);
  auto xBytes = readEntry(archive.get(), featuresIndex, xName);
  if (!xBytes) return xBytes.status();
  auto yBytes = readEntry(archive.get(), labelsIndex, yName);
  if (!yBytes) return yBytes.status();
  auto x = parseNpy(*xBytes, xName);
  if (!x) return x.status();
  auto y = parseNpy(*yBytes, yName);
  if (!y) return y.status();

  if (x->shape.size() < 2) {
    return malformed(xName, "expected shape (examples, features...), found " + x->shapeText());
  }
  const std::size_t n = x->shape[0];
  if (y->shape.size() != 1 || y->shape[0] != n) {
    return malformed(yName, "expected shape (" + std::to_string(n) + ",), one label per example of " +
                                detail::quoted(featuresName) + ", found " + y->shapeText());
  }
  if (n == 0) return malformed(xName, "no examples");
  const std::size_t dim = x->count / n;
  if (dim == 0) return malformed(xName, "no features in shape " + x->shapeText());
  std::vector<int> shape;
  if (x->shape.size() > 2) {
    for (std::size_t i = 1; i < x->shape.size(); ++i) {
      if (x->shape[i] > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
        return Status(StatusCode::kOutOfRange, xName + ": dimension " + std::to_string(x->shape[i]) + " is too large");
      }
      shape.push_back(static_cast<int>(x->shape[i]));
    }
  }
  labels.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (Status s = labels.addValue(y->at(i)); !s) {
      return Status(StatusCode::kMalformed, yName + " element " + std::to_string(i) + ": " + s.message());
    }
  }
  std::vector<float> features;
  features.reserve(x->count);
  for (std::size_t i = 0; i < n; ++i) {
    STARLING_RETURN_IF_ERROR(appendFeatures(*x, i * dim, dim, features, xName + " example " + std::to_string(i)));
  }
  return labels.build(std::move(features), dim, std::move(shape), path);
}

}  // namespace starling::data::detail
