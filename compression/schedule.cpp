#include "starling/compression/schedule.hpp"

#include <cmath>
#include <string>

namespace starling::compression {

Status checkDensity(double density, const char* what) {
  if (density > 0.0 && density <= 1.0) return Status::ok();
  return {StatusCode::kInvalidArgument, std::string(what) + " must be in (0, 1], got " + std::to_string(density)};
}

Result<std::unique_ptr<ConstantDensity>> ConstantDensity::create(double density) {
  STARLING_RETURN_IF_ERROR(checkDensity(density, "density"));
  return std::unique_ptr<ConstantDensity>(new ConstantDensity(density));
}

Result<std::unique_ptr<WarmupDensity>> WarmupDensity::create(double rho, std::uint32_t warmupRounds) {
  STARLING_RETURN_IF_ERROR(checkDensity(rho, "target density"));
  return std::unique_ptr<WarmupDensity>(new WarmupDensity(rho, warmupRounds));
}

double WarmupDensity::density(std::uint64_t round) const {
  if (round >= warmup_) return rho_;
  const double exponent = static_cast<double>(round + 1) / static_cast<double>(warmup_ + 1);
  return std::pow(rho_, exponent);
}

Result<std::unique_ptr<ControlledDensity>> ControlledDensity::create(double initial) {
  STARLING_RETURN_IF_ERROR(checkDensity(initial, "initial density"));
  return std::unique_ptr<ControlledDensity>(new ControlledDensity(initial));
}

Status ControlledDensity::set(double density) {
  STARLING_RETURN_IF_ERROR(checkDensity(density, "density"));
  density_.store(density, std::memory_order_relaxed);
  return Status::ok();
}

}  // namespace starling::compression
