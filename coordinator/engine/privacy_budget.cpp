#include "engine/privacy_budget.hpp"

#include <fmt/format.h>

#include <cmath>
#include <istream>
#include <limits>
#include <ostream>
#include <string_view>

namespace starling::coordinator {
namespace {

// Composes `rounds` rounds into `a`. Fixed-size rounds: replace-one adjacency, under
// which the sum's sensitivity is 2C, so the multiplier is sigma / 2. Checked settings:
// it fails only on a kind `a` does not hold already (epsilon() reports that case).
void addTo(PrivacyAccountant& a, bool poisson, double rate, double sigma, uint64_t rounds) {
  if (poisson)
    (void)a.addRounds(rate, sigma, rounds);
  else
    (void)a.addRoundsWithoutReplacement(rate, sigma / 2, rounds);
}

}  // namespace

Result<PrivacyBudget> PrivacyBudget::create(const EngineConfig& c) {
  if (c.sampling != "fixed" && c.sampling != "poisson")
    return Status(StatusCode::kInvalidArgument, fmt::format("unknown sampling '{}' (fixed or poisson)", c.sampling));
  if (c.sampling == "poisson" && !(c.samplingRate > 0 && c.samplingRate <= 1))
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("poisson sampling needs a sampling rate in (0, 1], not {}", c.samplingRate));
  if (!(c.clipNorm >= 0) || !std::isfinite(c.clipNorm))
    return Status(StatusCode::kInvalidArgument, fmt::format("clip norm {} is not a norm", c.clipNorm));
  if (!(c.noiseMultiplier >= 0) || !std::isfinite(c.noiseMultiplier))
    return Status(StatusCode::kInvalidArgument, fmt::format("noise multiplier {} is not >= 0", c.noiseMultiplier));
  if (!(c.targetEpsilon >= 0)) return Status(StatusCode::kInvalidArgument, "target epsilon must be >= 0");
  if (c.clipNorm == 0) {
    if (c.noiseMultiplier > 0 || c.targetEpsilon > 0)
      return Status(StatusCode::kInvalidArgument, "a noise multiplier or a target epsilon needs a clip norm");
    return PrivacyBudget(c);
  }
  if (!(c.privacyDelta > 0 && c.privacyDelta < 1))
    return Status(StatusCode::kInvalidArgument, fmt::format("privacy delta {} is not in (0, 1)", c.privacyDelta));
  auto refuse = [](std::string_view what) {
    return Status(StatusCode::kInvalidArgument, fmt::format("differential privacy does not combine with {}", what));
  };
  if (c.aggregation != "mean") return refuse("a robust aggregation (clipping already bounds each client)");
  if (c.senderMean) return refuse("the sender mean (its denominator depends on the updates)");
  if (c.extrapolate) return refuse("FedExP's extrapolation (its step depends on the updates)");
  if (c.stickyClients > 0) return refuse("sticky sampling (its picks depend on earlier rounds)");
  if (c.targetEpsilon > 0 && c.noiseMultiplier == 0) return refuse("a target epsilon without noise");
  if (c.adaptiveTau) return refuse("adaptive tau (ADACOMM steers from the clients' raw losses)");
  if (c.federatedEvalEvery > 0) return refuse("federated evaluation (its per-client sums are released unnoised)");
  if (c.mode == "ssp" || c.mode == "dssp")
    return refuse(
        "the ssp and dssp modes (a client out of budget would hold their clock gate; FedBuff, mode async, "
        "is supported)");
  if (c.noisePlacement != "central" && c.noisePlacement != "distributed")
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("unknown noise placement '{}' (central or distributed)", c.noisePlacement));
  if (c.noisePlacement == "distributed") {
    if (c.mode != "sync") return refuse("distributed noise in the asynchronous modes (not built)");
    if (c.serverClipNorm > 0)
      return refuse("distributed noise and server-side clipping (clipping a noised message shrinks its share)");
    // A client's presence must not change how many shares the sum carries: under
    // Poisson sampling (add/remove one client) it would, and the sampled Gaussian's
    // analysis assumes one variance in both worlds. Fixed-size rounds swap one client
    // for another, so both worlds hold the same shares.
    if (c.noiseMultiplier == 0) return refuse("distributed noise without a noise multiplier");
    if (c.sampling != "fixed")
      return refuse("distributed noise under poisson sampling (a client's presence changes the noise)");
    if (c.uplink != "identity" && c.uplink != "fp16")
      return refuse(
          fmt::format("distributed noise over the {} uplink (a noised message is dense: identity or fp16)", c.uplink));
  } else if (c.noiseShares > 0) {
    return Status(StatusCode::kInvalidArgument, "noise shares are for distributed noise");
  }
  return PrivacyBudget(c);
}

PrivacyBudget::PrivacyBudget(const EngineConfig& c)
    : clipNorm_(c.clipNorm),
      sigma_(c.noiseMultiplier),
      rate_(c.samplingRate),
      delta_(c.privacyDelta),
      target_(c.targetEpsilon),
      poisson_(c.sampling == "poisson"),
      clientsPerRound_(c.clientsPerRound),
      bufferSize_(coordinator::bufferSize(c)),
      shares_(coordinator::noiseShares(c)),
      individual_(c.clipNorm > 0 && c.mode != "sync") {
  if (individual_ && target_ > 0 && sigma_ > 0) {
    // The largest rho within the target: epsilon rises with rho (bisection).
    double lo = 0, hi = 1;
    while (epsilonOfRho(hi) <= target_ && hi < 1e12)
      hi *= 2;
    for (int i = 0; i < 100; ++i) {
      const double mid = 0.5 * (lo + hi);
      (epsilonOfRho(mid) <= target_ ? lo : hi) = mid;
    }
    targetRho_ = lo;
  }
}

double PrivacyBudget::epsilonOfRho(double rho) const {
  if (rho == 0) return 0;
  if (std::isinf(rho)) return std::numeric_limits<double>::infinity();
  const std::vector<double> orders = PrivacyAccountant::defaultOrders();
  std::vector<double> rdp(orders.size());
  for (std::size_t i = 0; i < orders.size(); ++i)
    rdp[i] = rho * orders[i];
  return epsilonFromRdp(orders, rdp, delta_).epsilon;
}

bool PrivacyBudget::clientAllowed(const std::string& id) const {
  if (!on() || target_ <= 0) return true;
  if (sigma_ == 0 || !segments_.empty()) return false;  // unbounded (epsilon())
  const auto it = rho_.find(id);
  return (it == rho_.end() ? 0.0 : it->second) + 2 / (sigma_ * sigma_) <= targetRho_;
}

void PrivacyBudget::stepReleased(const std::vector<std::pair<std::string, double>>& updates) {
  // A client's updates in one step add up before squaring (its sensitivity there).
  std::map<std::string, double> weights;
  for (const auto& [id, w] : updates)
    weights[id] += w;
  for (const auto& [id, w] : weights) {
    double& rho = rho_[id];
    rho += sigma_ > 0 ? 2 * w * w / (sigma_ * sigma_) : std::numeric_limits<double>::infinity();
    maxRho_ = std::max(maxRho_, rho);
  }
}

uint32_t noiseShares(const EngineConfig& c) {
  if (c.clipNorm <= 0 || c.noisePlacement != "distributed") return 0;
  return c.noiseShares > 0 ? c.noiseShares : std::max(1u, c.clientsPerRound);
}

double noiseShareStd(const EngineConfig& c) {
  const uint32_t m = noiseShares(c);
  return m == 0 ? 0.0 : c.noiseMultiplier * c.clipNorm / std::sqrt(double(m));
}

double PrivacyBudget::rate(std::size_t assigned, std::size_t idle) const {
  if (poisson_) return rate_;
  return idle == 0 ? 1.0 : std::min(1.0, double(assigned) / double(idle));
}

double PrivacyBudget::denominator(std::size_t idle) const {
  if (individual_) return double(bufferSize_);
  return poisson_ ? std::max(1.0, rate_ * double(idle)) : double(clientsPerRound_);
}

bool PrivacyBudget::allows(double rate) const {
  if (!on() || target_ <= 0 || individual_) return true;  // individual: clientAllowed
  if (!rho_.empty()) return false;                        // asynchronous steps before: epsilon() is infinite
  // The rounds so far spent an unbounded epsilon (epsilon()), or were of the other
  // sampling kind (the two do not compose): no round fits.
  if (std::isinf(epsilon())) return false;
  if (!segments_.empty() && segments_.front().poisson != poisson_) return false;
  PrivacyAccountant next = accountant_;
  addTo(next, poisson_, rate, sigma_, 1);
  return next.spent(delta_).epsilon <= target_;
}

void PrivacyBudget::committed(double rate) {
  if (!on()) {
    // A round without privacy after private ones (a restart that turned it off): a
    // round without noise, so that turning privacy on again reports epsilon infinite.
    if (segments_.empty()) return;
    if (segments_.back().sigma == 0 && segments_.back().rate == 1.0)
      ++segments_.back().rounds;
    else
      segments_.push_back(Segment{segments_.back().poisson, 1.0, 0.0, 1});
    return;
  }
  if (!segments_.empty() && segments_.back().poisson == poisson_ && segments_.back().rate == rate &&
      segments_.back().sigma == sigma_)
    ++segments_.back().rounds;
  else
    segments_.push_back(Segment{poisson_, rate, sigma_, 1});
  if (sigma_ > 0) addTo(accountant_, poisson_, rate, sigma_, 1);
}

double PrivacyBudget::epsilon() const {
  // Individual accounting and rounds of any other kind (sync rounds, or rounds without
  // privacy) bound nothing together.
  if ((!rho_.empty() || individual_) && !segments_.empty()) return std::numeric_limits<double>::infinity();
  if (!rho_.empty() || individual_) return epsilonOfRho(maxRho_);
  if (segments_.empty()) return 0;
  // Rounds without noise, or of both kinds (a restart that changed task.sampling: the
  // two are accounted under different adjacencies, and their sum bounds neither).
  for (const Segment& s : segments_)
    if (s.sigma == 0 || s.poisson != segments_.front().poisson) return std::numeric_limits<double>::infinity();
  return accountant_.spent(delta_).epsilon;
}

void PrivacyBudget::writeState(std::ostream& out) const {
  for (const auto& [id, rho] : rho_)
    out << "privacy-client " << id << fmt::format(" {:.17g}", rho) << "\n";
  for (const Segment& s : segments_)
    out << "privacy " << (s.poisson ? "poisson " : "fixed ")
        << fmt::format("{:.17g} {:.17g} {}", s.rate, s.sigma, s.rounds) << "\n";
}

bool PrivacyBudget::readState(const std::string& key, std::istream& in, bool& ok) {
  if (key == "privacy-client") {
    std::string id, value;
    ok = static_cast<bool>(in >> id >> value);
    double rho = 0;
    if (ok) {
      // "inf": a step released without noise.
      char* end = nullptr;
      rho = std::strtod(value.c_str(), &end);
      ok = end == value.c_str() + value.size() && rho > 0;
    }
    if (ok) {
      rho_[id] = rho;
      maxRho_ = std::max(maxRho_, rho);
    }
    return true;
  }
  if (key != "privacy") return false;
  std::string kind;
  Segment s;
  ok = static_cast<bool>(in >> kind >> s.rate >> s.sigma >> s.rounds) && (kind == "poisson" || kind == "fixed") &&
       s.rate > 0 && s.rate <= 1 && s.sigma >= 0 && s.rounds > 0;
  if (!ok) return true;
  s.poisson = kind == "poisson";
  segments_.push_back(s);
  // Composed as read (each line once); epsilon() says when the segments bound nothing.
  if (s.sigma > 0 && s.poisson == segments_.front().poisson) addTo(accountant_, s.poisson, s.rate, s.sigma, s.rounds);
  return true;
}

}  // namespace starling::coordinator
