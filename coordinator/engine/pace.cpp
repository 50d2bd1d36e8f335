#include "pace.hpp"

#include <algorithm>
#include <cmath>
#include <istream>
#include <limits>
#include <numeric>
#include <ostream>
#include <vector>

namespace starling::coordinator {
namespace {

bool usesDensity(const std::string& name) {
  return name == "topk" || name == "topk-sampled" || name == "randk";
}

}  // namespace

Result<Pace> Pace::create(const EngineConfig& c) {
  if (!(c.budgetTauFactor >= 1))
    return Status(StatusCode::kInvalidArgument, "the budget tau factor must be at least 1 (1 = off)");
  if (c.tau == 0 || c.tauMin == 0 || c.tauMin > c.tauMax)
    return Status(StatusCode::kInvalidArgument, "need 1 <= tauMin <= tauMax and tau >= 1");
  auto up = compression::WarmupDensity::create(c.uplinkDensity, c.warmupRounds);
  if (!up) return up.status().withContext("uplink density");
  auto down = compression::WarmupDensity::create(c.downlinkDensity, c.warmupRounds);
  if (!down) return down.status().withContext("downlink density");
  return Pace(c, std::move(*up), std::move(*down));
}

Pace::Pace(const EngineConfig& c, std::unique_ptr<compression::DensitySchedule> up,
           std::unique_ptr<compression::DensitySchedule> down)
    : lr_(c.lr),
      lrDecay_(c.lrDecay),
      budgetFraction_(c.budgetFraction),
      budgetQuantile_(c.budgetQuantile),
      budgetTauFactor_(c.budgetTauFactor),
      lossSmoothing_(c.lossSmoothing),
      deadlineMs_(static_cast<double>(c.deadlineMs)),
      tau0_(c.tau),
      tauMin_(c.tauMin),
      tauMax_(c.tauMax),
      adaptive_(c.adaptiveTau),
      stepBudgets_(c.stepBudgets),
      dynamicBatch_(c.dynamicBatch),
      upDensity_(usesDensity(c.uplink)),
      downDensity_(usesDensity(c.downlink)),
      up_(std::move(up)),
      down_(std::move(down)),
      tau_(c.tau) {}

double Pace::lr(uint64_t commits) const {
  if (followedLr_) return *followedLr_;
  return lr_ * std::pow(lrDecay_, static_cast<double>(commits));
}

void Pace::follow(uint32_t tau, double lr) {
  tau_ = std::clamp(tau, tauMin_, tauMax_);
  followedLr_ = lr;
}

double Pace::uplinkDensity(uint64_t commits) const {
  return upDensity_ ? up_->density(commits) : 1.0;
}

double Pace::downlinkDensity(uint64_t commits) const {
  return downDensity_ ? down_->density(commits) : 1.0;
}

double Pace::roundBudgetMs(std::span<const double> measured) const {
  if (!stepBudgets_ || !(budgetQuantile_ > 0) || measured.empty()) return std::numeric_limits<double>::infinity();
  std::vector<double> speeds(measured.begin(), measured.end());
  std::sort(speeds.begin(), speeds.end());
  const double q = std::min(budgetQuantile_, 1.0) * static_cast<double>(speeds.size() - 1);
  return static_cast<double>(tau_) / speeds[static_cast<std::size_t>(std::floor(q))];
}

uint32_t Pace::stepsFor(double stepsPerMs, double budgetMs) const {
  if (!stepBudgets_ || stepsPerMs <= 0) return tau_;
  const double affordable = stepsPerMs * std::min(budgetMs, budgetFraction_ * deadlineMs_);
  const auto budget = static_cast<uint32_t>(std::clamp(std::floor(affordable), 0.0, 4e9));
  // Time budgets: a client faster than the quantile's may use its time for more than tau.
  uint32_t most = tau_;
  if (budgetTauFactor_ > 1 && std::isfinite(budgetMs))
    most = static_cast<uint32_t>(std::clamp(std::floor(budgetTauFactor_ * tau_), double(tau_), 4e9));
  return std::clamp(std::min(most, budget), tauMin_, std::max(tauMin_, most));
}

double Pace::referenceSpeed(std::span<const double> measured) const {
  if (!dynamicBatch_ || measured.empty()) return 0;
  if (!(budgetQuantile_ > 0)) return std::accumulate(measured.begin(), measured.end(), 0.0) / double(measured.size());
  std::vector<double> speeds(measured.begin(), measured.end());
  std::sort(speeds.begin(), speeds.end());
  return speeds[static_cast<std::size_t>(std::floor(std::min(budgetQuantile_, 1.0) * double(speeds.size() - 1)))];
}

double Pace::batchScale(double stepsPerMs, double meanSpeed) const {
  if (!dynamicBatch_ || !(stepsPerMs > 0) || !(meanSpeed > 0)) return 1.0;
  return std::clamp(stepsPerMs / meanSpeed, kMinBatchScale, kMaxBatchScale);
}

void Pace::roundCommitted(double roundLoss, uint64_t commits) {
  if (!adaptive_) return;
  if (!haveLoss_) {
    lossF0_ = lossF_ = roundLoss;
    haveLoss_ = true;
    return;
  }
  lossF_ = lossSmoothing_ * lossF_ + (1.0 - lossSmoothing_) * roundLoss;
  if (lossF0_ <= 0) return;
  const double ratio = (lr_ / lr(commits)) * (lossF_ / lossF0_);
  const double t = std::ceil(std::sqrt(std::max(ratio, 0.0)) * tau0_);
  tau_ = static_cast<uint32_t>(std::clamp(t, double(tauMin_), double(tauMax_)));
}

void Pace::writeState(std::ostream& o) const {
  o << "\ntau " << tau_ << "\nloss0 " << lossF0_ << "\nloss " << lossF_ << "\nhaveLoss " << (haveLoss_ ? 1 : 0);
}

bool Pace::readState(const std::string& key, std::istream& in, bool& ok) {
  if (key == "tau") {
    ok = static_cast<bool>(in >> tau_);
  } else if (key == "loss0") {
    ok = static_cast<bool>(in >> lossF0_);
  } else if (key == "loss") {
    ok = static_cast<bool>(in >> lossF_);
  } else if (key == "haveLoss") {
    int v = 0;
    ok = static_cast<bool>(in >> v);
    haveLoss_ = v != 0;
  } else {
    return false;
  }
  return true;
}

}  // namespace starling::coordinator
