#pragma once
// Density schedules: which density top-k or rand-k uses in a round.
//
// `round` counts from 0 at the start of training (the first round with compression).
// density() is const and thread-safe on every schedule; ControlledDensity::set() may
// be called concurrently with density().

#include <atomic>
#include <cstdint>
#include <memory>

#include "starling/util/status.hpp"

namespace starling::compression {

class DensitySchedule {
 public:
  virtual ~DensitySchedule() = default;
  virtual double density(std::uint64_t round) const = 0;
};

// The same density every round.
class ConstantDensity final : public DensitySchedule {
 public:
  // density in (0, 1].
  static Result<std::unique_ptr<ConstantDensity>> create(double density);
  double density(std::uint64_t) const override { return density_; }

 private:
  explicit ConstantDensity(double density) : density_(density) {}
  double density_;
};

// DGC's warm-up: density_w = rho^((w + 1) / (W + 1)) for rounds w < W, then rho.
// For rho = 0.001, W = 4: 25%, 6.3%, 1.6%, 0.4%, then 0.1%. W = 0 is constant rho.
class WarmupDensity final : public DensitySchedule {
 public:
  // rho in (0, 1].
  static Result<std::unique_ptr<WarmupDensity>> create(double rho, std::uint32_t warmupRounds);
  double density(std::uint64_t round) const override;

 private:
  WarmupDensity(double rho, std::uint32_t warmupRounds) : rho_(rho), warmup_(warmupRounds) {}
  double rho_;
  std::uint32_t warmup_;
};

// The coordinator's controller sets the density for the coming rounds; density()
// returns the last value set, whatever the round.
class ControlledDensity final : public DensitySchedule {
 public:
  static Result<std::unique_ptr<ControlledDensity>> create(double initial);
  double density(std::uint64_t) const override { return density_.load(std::memory_order_relaxed); }
  // density in (0, 1]; otherwise kInvalidArgument and the density is unchanged.
  Status set(double density);

 private:
  explicit ControlledDensity(double initial) : density_(initial) {}
  std::atomic<double> density_;
};

// Checks 0 < density <= 1 (and not NaN); `what` names the setting in the message.
Status checkDensity(double density, const char* what);

}  // namespace starling::compression
