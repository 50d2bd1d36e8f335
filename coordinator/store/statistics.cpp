// The statistics round of a task that standardizes (schema version 6).
#include <cstring>

#include "store_impl.hpp"

namespace starling::coordinator {
using namespace store_detail;

namespace {

std::vector<unsigned char> bytesOf(const std::vector<double>& v) {
  static_assert(std::endian::native == std::endian::little, "doubles are stored little-endian");
  std::vector<unsigned char> out(v.size() * sizeof(double));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<double> doublesOf(std::span<const unsigned char> bytes) {
  std::vector<double> out(bytes.size() / sizeof(double));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(double));
  return out;
}

std::string joined(const std::vector<std::string>& ids) {
  std::string out;
  for (const std::string& id : ids)
    out += (out.empty() ? "" : "\n") + id;
  return out;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

}  // namespace

Status Store::Impl::prepareStatisticsStatements() {
  if (version < 6) return Status::ok();  // the table came with version 6
  STARLING_RETURN_IF_ERROR(prepare(&saveStatistics,
                                   "INSERT OR REPLACE INTO feature_statistics (id, at_ms, features, centre, "
                                   "participants, examples, mean, std, checksum) VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, "
                                   "?7, ?8)"));
  return prepare(&selectStatistics,
                 "SELECT at_ms, features, centre, participants, examples, mean, std, checksum FROM "
                 "feature_statistics WHERE id = 1");
}

Status Store::saveFeatureStatistics(const FeatureStatisticsRecord& r) {
  Impl& d = *impl_;
  auto fail = [&](const Status& s) {
    return Status(s.code(), fmt::format("recording the feature statistics in '{}': {}", d.path, s.message()));
  };
  if (Status w = d.writable(); !w) return fail(w);
  if (r.mean.empty() || r.mean.size() != r.std.size())
    return fail(invalid(fmt::format("{} means and {} standard deviations", r.mean.size(), r.std.size())));
  std::vector<unsigned char> both = bytesOf(r.mean);
  const std::vector<unsigned char> sd = bytesOf(r.std);
  const std::size_t meanBytes = both.size();
  both.insert(both.end(), sd.begin(), sd.end());
  // A single statement is its own transaction.
  d.saveStatistics->bind(1, r.atMs)
      .bind(2, static_cast<int64_t>(r.mean.size()))
      .bind(3, int64_t(r.centre ? 1 : 0))
      .bind(4, std::string_view(joined(r.clients)))
      .bind(5, toSql(r.examples))
      .bindBlob(6, std::span<const unsigned char>(both).first(meanBytes))
      .bindBlob(7, std::span<const unsigned char>(sd))
      .bind(8, toSql(fnv1a(both)));
  if (Status s = d.saveStatistics->run(); !s) return fail(s);
  return Status::ok();
}

Result<std::optional<FeatureStatisticsRecord>> Store::featureStatistics() {
  Impl& d = *impl_;
  if (!d.selectStatistics) return std::optional<FeatureStatisticsRecord>();
  sqlite::Statement& s = *d.selectStatistics;
  Result<bool> row = s.step();
  if (!row) return row.status().withContext(fmt::format("reading the feature statistics from '{}'", d.path));
  if (!*row) {
    s.reset();
    return std::optional<FeatureStatisticsRecord>();
  }
  FeatureStatisticsRecord r;
  r.atMs = s.int64(0);
  const int64_t features = s.int64(1);
  r.centre = s.int64(2) != 0;
  r.clients = split(s.text(3));
  r.examples = fromSql(s.int64(4));
  std::vector<unsigned char> both(s.blob(5).begin(), s.blob(5).end());
  const auto sd = s.blob(6);
  both.insert(both.end(), sd.begin(), sd.end());
  const uint64_t checksum = fromSql(s.int64(7));
  s.reset();
  if (fnv1a(both) != checksum || both.size() != 2 * static_cast<std::size_t>(features) * sizeof(double))
    return Status(StatusCode::kMalformed,
                  fmt::format("'{}': the feature statistics are corrupt ({} features, {} bytes, checksum {:#018x}, "
                              "stored {:#018x})",
                              d.path, features, both.size(), fnv1a(both), checksum));
  const std::size_t half = both.size() / 2;
  r.mean = doublesOf(std::span<const unsigned char>(both).first(half));
  r.std = doublesOf(std::span<const unsigned char>(both).subspan(half));
  return std::optional<FeatureStatisticsRecord>(std::move(r));
}

}  // namespace starling::coordinator
