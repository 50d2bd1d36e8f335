// The model file: save() and load().
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "starling/model/model.hpp"
#include "starling/util/checksum.hpp"

namespace starling::model {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the model file stores little-endian floats; add byte swapping for this target");

constexpr char kMagic[8] = {'S', 'T', 'R', 'L', 'M', 'D', 'L', '\0'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxSpecLength = 4096;

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

// Reads a T at pos, advancing it; false when the bytes run out.
template <typename T>
bool get(const std::string& in, std::size_t& pos, T& v) {
  if (in.size() - pos < sizeof(T)) return false;
  std::memcpy(&v, in.data() + pos, sizeof(T));
  pos += sizeof(T);
  return true;
}

}  // namespace

Status Model::save(const std::string& path) const {
  std::string out;
  out.reserve(64 + spec().size() + params_.size() * sizeof(float));
  out.append(kMagic, sizeof(kMagic));
  put<uint32_t>(out, kVersion);
  put<uint32_t>(out, static_cast<uint32_t>(spec().size()));
  out.append(spec());
  put<uint64_t>(out, params_.size());
  out.append(reinterpret_cast<const char*>(params_.data()), params_.size() * sizeof(float));
  put<uint64_t>(out, checksum64(params_));

  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return {StatusCode::kIo, "cannot create model file " + tmp + ": " + std::strerror(errno)};
    f.write(out.data(), static_cast<std::streamsize>(out.size()));
    f.flush();
    if (!f) return {StatusCode::kIo, "cannot write model file " + tmp + ": " + std::strerror(errno)};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return {StatusCode::kIo, "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno)};
  return Status::ok();
}

Result<Model> Model::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status{StatusCode::kNotFound, "model file " + path + " cannot be opened: " + std::strerror(errno)};
  std::string in((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto malformed = [&path](const std::string& why) {
    return Status{StatusCode::kMalformed, "model file " + path + ": " + why};
  };
  std::size_t pos = 0;
  if (in.size() < sizeof(kMagic) || std::memcmp(in.data(), kMagic, sizeof(kMagic)) != 0)
    return malformed("not a Starling model file (bad magic)");
  pos = sizeof(kMagic);
  uint32_t version = 0;
  uint32_t specLength = 0;
  if (!get(in, pos, version)) return malformed("truncated header");
  if (version != kVersion)
    return Status{StatusCode::kUnsupported, "model file " + path + " has version " + std::to_string(version) +
                                                "; this build reads version " + std::to_string(kVersion)};
  if (!get(in, pos, specLength)) return malformed("truncated header");
  if (specLength > kMaxSpecLength || in.size() - pos < specLength)
    return malformed("spec length " + std::to_string(specLength) + " is impossible");
  const std::string spec = in.substr(pos, specLength);
  pos += specLength;
  Result<Model> model = Model::fromSpec(spec);
  if (!model) return malformed(model.status().message());
  uint64_t count = 0;
  if (!get(in, pos, count)) return malformed("truncated header");
  if (count != model->numParams())
    return malformed("holds " + std::to_string(count) + " parameters but its spec '" + spec + "' needs " +
                     std::to_string(model->numParams()));
  const std::size_t bytes = model->numParams() * sizeof(float);
  if (in.size() - pos < bytes + sizeof(uint64_t))
    return malformed("truncated: " + std::to_string(in.size()) + " bytes");
  std::memcpy(model->params_.data(), in.data() + pos, bytes);
  pos += bytes;
  uint64_t sum = 0;
  (void)get(in, pos, sum);
  if (pos != in.size()) return malformed(std::to_string(in.size() - pos) + " unexpected trailing bytes");
  if (sum != checksum64(model->params_)) return malformed("checksum mismatch: the parameters are corrupt");
  return model;
}

}  // namespace starling::model
