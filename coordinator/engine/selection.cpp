#include "selection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <istream>
#include <ostream>
#include <utility>

#include "splitmix.hpp"

namespace starling::coordinator {
namespace {

// Orders the sticky group's members last assigned in the same round, for leaving it:
// a pseudo-random order that changes from round to round. By id alone the smallest ids
// would always leave first, and over a long run be selected less often than the others.
uint64_t stickyTieKey(const std::string& id, uint64_t round) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the id
  for (const unsigned char ch : id)
    h = (h ^ ch) * 0x100000001b3ull;
  uint64_t state = h ^ (round * kGolden);
  return splitmix(state);
}

}  // namespace

Result<Selection> Selection::create(const EngineConfig& c) {
  if (c.stickyClients > 0) {
    const auto want = static_cast<uint64_t>(std::ceil(c.clientsPerRound * c.overSelection - 1e-9));
    if (c.stickyClients < want)
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("sticky clients ({}) must be at least the clients selected per round ({})",
                                c.stickyClients, want));
    if (!(c.stickyFraction >= 0 && c.stickyFraction <= 1))
      return Status(StatusCode::kInvalidArgument, "the sticky fraction must be in [0, 1]");
  }
  if (c.sampling == "poisson" && c.stickyClients > 0)
    return Status(StatusCode::kInvalidArgument, "poisson sampling and sticky sampling exclude each other");
  return Selection(c);
}

Selection::Selection(const EngineConfig& c)
    : clientsPerRound_(c.clientsPerRound),
      minClients_(c.minClients),
      stickyClients_(c.stickyClients),
      overSelection_(c.overSelection),
      stickyFraction_(c.stickyFraction),
      stickyReweight_(c.stickyReweight),
      poissonRate_(c.sampling == "poisson" ? c.samplingRate : 0.0),
      rng_(c.seed) {}

bool Selection::due(std::size_t idle) const {
  const uint32_t need = minClients_ > 0 ? minClients_ : clientsPerRound_;
  return idle >= need && idle > 0;
}

std::vector<Selection::Pick> Selection::select(std::vector<std::string> idle, uint64_t round,
                                               std::optional<std::size_t> count) {
  std::vector<const std::string*> ids;
  ids.reserve(idle.size());
  for (const std::string& id : idle)
    ids.push_back(&id);
  return select(std::move(ids), round, count);
}

std::vector<Selection::Pick> Selection::select(std::vector<const std::string*> idle, uint64_t round,
                                               std::optional<std::size_t> count) {
  const auto want = count ? *count : static_cast<std::size_t>(std::ceil(clientsPerRound_ * overSelection_ - 1e-9));
  auto shuffle = [&](std::vector<const std::string*>& v) {
    for (std::size_t i = v.size(); i > 1; --i)
      std::swap(v[i - 1], v[splitmix(rng_) % i]);
  };
  std::vector<Pick> picks;
  if (poissonRate_ > 0 && !count) {
    // Poisson sampling: each idle client independently with the rate, in the caller's
    // order (53-bit uniforms; a rate of 1 takes everyone).
    for (const std::string* id : idle)
      if (double(splitmix(rng_) >> 11) * 0x1.0p-53 < poissonRate_) picks.push_back({*id, false, 1.0});
    return picks;
  }
  if (stickyClients_ == 0) {
    std::vector<const std::string*>& all = idle;
    shuffle(all);
    all.resize(std::min(all.size(), want));
    for (const std::string* id : all)
      picks.push_back({*id, false, 1.0});
    return picks;
  }
  // GlueFL: cs of the n selected from the group's idle members, the other ns from the
  // other idle clients (either part takes more when the other runs short). A member is
  // selected with probability cs / s, another client with ns / o; uniform sampling
  // selects each with n / N, so the selection weights are (n / N) / (cs / s) and
  // (n / N) / (ns / o): E[selected x weight] = n / N for every idle client, given the group.
  std::vector<const std::string*> members, others;
  for (const std::string* id : idle)
    (sticky_.count(*id) > 0 ? members : others).push_back(id);
  shuffle(members);
  shuffle(others);
  const std::size_t n = std::min(idle.size(), want);
  std::size_t cs = std::min(members.size(), static_cast<std::size_t>(std::lround(stickyFraction_ * double(n))));
  const std::size_t ns = std::min(others.size(), n - cs);
  cs = std::min(members.size(), n - ns);
  const double uniform = double(n) / double(idle.size());
  auto weight = [&](std::size_t available, std::size_t drawn) {
    return stickyReweight_ ? uniform * double(available) / double(drawn) : 1.0;
  };
  for (std::size_t i = 0; i < cs; ++i)
    picks.push_back({*members[i], true, weight(members.size(), cs)});
  for (std::size_t i = 0; i < ns; ++i)
    picks.push_back({*others[i], false, weight(others.size(), ns)});
  // Every participant is (now) a member, assigned this round; the members assigned
  // longest ago leave (ties: in stickyTieKey's order, deterministic for the state).
  for (const Pick& p : picks)
    sticky_[p.id] = round;
  auto age = [](const auto& member) { return std::pair(member.second, stickyTieKey(member.first, member.second)); };
  while (sticky_.size() > stickyClients_) {
    auto oldest = sticky_.begin();
    for (auto it = sticky_.begin(); it != sticky_.end(); ++it)
      if (age(*it) < age(*oldest)) oldest = it;
    sticky_.erase(oldest);
  }
  return picks;
}

std::vector<std::string> Selection::group() const {
  std::vector<std::string> out;
  for (const auto& [id, round] : sticky_)
    out.push_back(id);
  return out;
}

void Selection::writeRng(std::ostream& o) const {
  o << "\nrng " << rng_;
}

void Selection::writeGroup(std::ostream& o) const {
  for (const auto& [id, round] : sticky_)
    o << "sticky " << id << " " << round << "\n";
}

bool Selection::readState(const std::string& key, std::istream& in, bool& ok) {
  if (key == "rng") {
    ok = static_cast<bool>(in >> rng_);
  } else if (key == "sticky") {
    std::string id;
    uint64_t round = 0;
    ok = static_cast<bool>(in >> id >> round);
    if (ok) sticky_[id] = round;
  } else {
    return false;
  }
  return true;
}

}  // namespace starling::coordinator
