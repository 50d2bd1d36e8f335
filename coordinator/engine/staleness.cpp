#include "engine/staleness.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace starling::coordinator {
namespace {

// A finite number >= 0 that is the whole of s.
bool nonNegative(std::string_view s, double& out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(out) && out >= 0;
}

std::string shortest(double v) {
  char buf[32];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, ptr) : std::to_string(v);
}

}  // namespace

Result<StalenessWeight> StalenessWeight::parse(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "staleness weight '" + std::string(text) + "': " + why);
  };
  if (text == "constant") return StalenessWeight(Kind::kConstant, 0, 0);
  if (text == "poly") return StalenessWeight(Kind::kPoly, 0.5, 0);
  if (text.starts_with("poly:")) {
    double a = 0;
    if (!nonNegative(text.substr(5), a)) return bad("the exponent must be a number >= 0");
    return StalenessWeight(Kind::kPoly, a, 0);
  }
  if (text.starts_with("hinge:")) {
    const std::string_view rest = text.substr(6);
    const std::size_t colon = rest.find(':');
    double a = 0, b = 0;
    if (colon == std::string_view::npos || !nonNegative(rest.substr(0, colon), a) ||
        !nonNegative(rest.substr(colon + 1), b))
      return bad("write hinge:A:B with numbers A, B >= 0");
    return StalenessWeight(Kind::kHinge, a, std::floor(b));
  }
  return bad("expected constant, poly, poly:A or hinge:A:B");
}

double StalenessWeight::inverse(uint64_t staleness) const {
  const double s = static_cast<double>(staleness);
  switch (kind_) {
    case Kind::kConstant:
      return 1.0;
    case Kind::kPoly:
      return a_ == 0.5 ? std::sqrt(1.0 + s) : std::pow(1.0 + s, a_);
    case Kind::kHinge:
      return s <= b_ ? 1.0 : a_ * (s - b_) + 1.0;
  }
  return 1.0;
}

std::string StalenessWeight::name() const {
  switch (kind_) {
    case Kind::kConstant:
      return "constant";
    case Kind::kPoly:
      return "poly:" + shortest(a_);
    case Kind::kHinge:
      return "hinge:" + shortest(a_) + ":" + shortest(b_);
  }
  return "constant";
}

void ClockBound::join(const std::string& client, int64_t nowMs, uint64_t clock) {
  const uint64_t floor = minClock();
  ClientClock& c = clients_[client];
  c.clock = std::max({c.clock, clock, floor});
  c.lastFinishMs = nowMs;
  c.intervalMs = -1;
  c.extraLeft = 0;
  c.waiting = false;
}

std::vector<std::string> ClockBound::leave(const std::string& client, int64_t nowMs) {
  if (clients_.erase(client) == 0) return {};
  return release(nowMs);
}

ClockBound::Step ClockBound::finished(const std::string& client, int64_t nowMs) {
  if (!active(client)) join(client, nowMs);
  ClientClock& p = clients_.at(client);
  p.clock += 1;
  p.intervalMs = std::max<int64_t>(0, nowMs - p.lastFinishMs);
  p.lastFinishMs = nowMs;
  p.waiting = false;
  Step step;
  step.proceed = mayStart(client, p, nowMs);
  if (!step.proceed) {
    p.waiting = true;
    ++waits_;
  }
  step.released = release(nowMs);
  return step;
}

bool ClockBound::mayStart(const std::string& id, ClientClock& p, int64_t nowMs) {
  const uint64_t slowest = minClock();
  const uint64_t lead = p.clock - slowest;
  if (lead <= options_.bound) {
    p.extraLeft = 0;
    return true;
  }
  if (p.extraLeft > 0) {
    --p.extraLeft;
    return true;
  }
  if (options_.extraMax == 0 || p.intervalMs <= 0) return false;
  // The slowest clients' predicted next finish; the minimum clock rises when the last
  // of them finishes.
  int64_t next = std::numeric_limits<int64_t>::min();
  for (const auto& [qid, q] : clients_) {
    if (qid == id || q.clock != slowest) continue;
    if (q.intervalMs < 0) return false;  // no prediction: wait
    next = std::max(next, q.lastFinishMs + q.intervalMs);
  }
  if (next <= nowMs) return false;                                     // the slowest are overdue: waiting is short
  const int64_t r = (next - nowMs + p.intervalMs - 1) / p.intervalMs;  // ceil
  const int64_t room = static_cast<int64_t>(options_.bound) + options_.extraMax - static_cast<int64_t>(lead) + 1;
  if (r < 1 || r > room) return false;
  p.extraLeft = static_cast<uint32_t>(r - 1);  // this step is the first of the r
  ++grants_;
  return true;
}

std::vector<std::string> ClockBound::release(int64_t nowMs) {
  std::vector<std::string> out;
  for (auto& [id, c] : clients_) {
    if (!c.waiting) continue;
    if (mayStart(id, c, nowMs)) {
      c.waiting = false;
      out.push_back(id);
    }
  }
  return out;
}

bool ClockBound::waiting(const std::string& client) const {
  auto it = clients_.find(client);
  return it != clients_.end() && it->second.waiting;
}

uint64_t ClockBound::clock(const std::string& client) const {
  auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.clock;
}

uint64_t ClockBound::minClock() const {
  uint64_t m = std::numeric_limits<uint64_t>::max();
  for (const auto& [id, c] : clients_)
    m = std::min(m, c.clock);
  return clients_.empty() ? 0 : m;
}

uint32_t ClockBound::extraLeft(const std::string& client) const {
  auto it = clients_.find(client);
  return it == clients_.end() ? 0 : it->second.extraLeft;
}

}  // namespace starling::coordinator
