#include "starling/compression/error_feedback.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "reduce.hpp"

namespace starling::compression {

Result<ErrorFeedback> ErrorFeedback::create(std::size_t d, ErrorFeedbackOptions options) {
  if (d == 0) return Status{StatusCode::kInvalidArgument, "error feedback needs at least one element"};
  if (!(options.decayPerMissedRound >= 0.0f && options.decayPerMissedRound <= 1.0f)) {
    return Status{StatusCode::kInvalidArgument,
                  "decay per missed round must be in [0, 1], got " + std::to_string(options.decayPerMissedRound)};
  }
  if (!(options.maxErrorRatio >= 0.0) || !std::isfinite(options.maxErrorRatio)) {
    return Status{StatusCode::kInvalidArgument, "error cap must be a finite ratio >= 0 (0 disables it), got " +
                                                    std::to_string(options.maxErrorRatio)};
  }
  return ErrorFeedback(d, options);
}

ErrorFeedback::ErrorFeedback(std::size_t d, ErrorFeedbackOptions options)
    : options_(options), memory_(d, 0.0f), corrected_(d, 0.0f) {}

Status ErrorFeedback::compress(std::span<const float> v, Compressor& compressor, const CompressParams& params,
                               Compressed& out) {
  if (pending_) {
    return {StatusCode::kInvalidArgument, "error feedback: the previous update was neither committed nor rolled back"};
  }
  if (v.size() != memory_.size()) {
    return {StatusCode::kInvalidArgument, "error feedback holds " + std::to_string(memory_.size()) +
                                              " elements, update has " + std::to_string(v.size())};
  }
  for (std::size_t i = 0; i < v.size(); ++i)
    corrected_[i] = v[i] + memory_[i];
  STARLING_RETURN_IF_ERROR(compressor.compress(corrected_, params, out));
  pendingQ_ = out;
  pendingNorm_ = std::sqrt(detail::sumSquares(corrected_.data(), corrected_.size()));
  pending_ = true;
  return Status::ok();
}

Status ErrorFeedback::commit() {
  if (!pending_) return {StatusCode::kInvalidArgument, "error feedback: nothing to commit"};
  // e <- p - q, computed in the buffer of p, which then becomes the memory.
  STARLING_RETURN_IF_ERROR(addScaled(pendingQ_, -1.0f, corrected_));
  memory_.swap(corrected_);
  pending_ = false;
  missed_ = 0;
  const double norm = std::sqrt(detail::sumSquares(memory_.data(), memory_.size()));
  lastRatio_ = pendingNorm_ > 0.0 ? norm / pendingNorm_ : 0.0;
  if (options_.maxErrorRatio > 0.0 && norm > options_.maxErrorRatio * pendingNorm_) {
    const auto scale = static_cast<float>(options_.maxErrorRatio * pendingNorm_ / norm);
    for (float& e : memory_)
      e *= scale;
  }
  return Status::ok();
}

Status ErrorFeedback::rollback() {
  if (!pending_) return {StatusCode::kInvalidArgument, "error feedback: nothing to roll back"};
  memory_.swap(corrected_);  // e <- p: the round's input stays in the memory
  pending_ = false;
  return Status::ok();
}

Status ErrorFeedback::missedRounds(std::uint32_t n) {
  if (pending_) {
    return {StatusCode::kInvalidArgument, "error feedback: resolve the pending update before recording missed rounds"};
  }
  if (n == 0) return Status::ok();
  missed_ += n;
  if (options_.resetAfterMissedRounds > 0 && missed_ >= options_.resetAfterMissedRounds) {
    std::fill(memory_.begin(), memory_.end(), 0.0f);
    return Status::ok();
  }
  if (options_.decayPerMissedRound < 1.0f) {
    const auto factor =
        static_cast<float>(std::pow(static_cast<double>(options_.decayPerMissedRound), static_cast<double>(n)));
    for (float& e : memory_)
      e *= factor;
  }
  return Status::ok();
}

Status ErrorFeedback::carry(std::span<const std::uint32_t> at, std::span<const float> extra) {
  if (pending_) return {StatusCode::kInvalidArgument, "error feedback: resolve the pending update before carrying"};
  if (at.empty()) {
    if (extra.size() != memory_.size())
      return {StatusCode::kInvalidArgument, "error feedback holds " + std::to_string(memory_.size()) +
                                                " elements, carried " + std::to_string(extra.size())};
    for (std::size_t i = 0; i < extra.size(); ++i)
      memory_[i] += extra[i];
    return Status::ok();
  }
  if (at.size() != extra.size())
    return {StatusCode::kInvalidArgument, "error feedback: " + std::to_string(at.size()) + " indices for " +
                                              std::to_string(extra.size()) + " values"};
  for (std::uint32_t i : at)
    if (i >= memory_.size()) return {StatusCode::kInvalidArgument, "error feedback: index out of range"};
  for (std::size_t j = 0; j < at.size(); ++j)
    memory_[at[j]] += extra[j];
  return Status::ok();
}

void ErrorFeedback::reset() {
  std::fill(memory_.begin(), memory_.end(), 0.0f);
  pending_ = false;
  missed_ = 0;
  lastRatio_ = 0.0;
}

Status ErrorFeedback::restore(std::span<const float> saved) {
  if (saved.size() != memory_.size())
    return Status(StatusCode::kInvalidArgument, "saved memory has " + std::to_string(saved.size()) +
                                                    " elements, this memory has " + std::to_string(memory_.size()));
  std::copy(saved.begin(), saved.end(), memory_.begin());
  pending_ = false;
  missed_ = 0;
  return Status::ok();
}

}  // namespace starling::compression
