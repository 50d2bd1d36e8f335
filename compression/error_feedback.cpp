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
                               Compressed& out, std::uint64_t tag, double clipNorm) {
  if (isPending(tag)) {
    return {StatusCode::kInvalidArgument,
            "error feedback: update " + std::to_string(tag) + " is pending, neither committed nor rolled back"};
  }
  if (v.size() != memory_.size()) {
    return {StatusCode::kInvalidArgument, "error feedback holds " + std::to_string(memory_.size()) +
                                              " elements, update has " + std::to_string(v.size())};
  }
  for (std::size_t i = 0; i < v.size(); ++i)
    corrected_[i] = v[i] + memory_[i];
  STARLING_RETURN_IF_ERROR(compressor.compress(corrected_, params, out));
  if (clipNorm > 0) {
    auto clipped = clipToNorm(out, clipNorm);
    if (!clipped) return clipped.status();
  }
  Pending p{tag, out, std::sqrt(detail::sumSquares(corrected_.data(), corrected_.size()))};
  // e <- p - q, computed in the buffer of p, which then becomes the memory.
  STARLING_RETURN_IF_ERROR(addScaled(out, -1.0f, corrected_));
  memory_.swap(corrected_);
  pending_.push_back(std::move(p));
  return Status::ok();
}

bool ErrorFeedback::isPending(std::uint64_t tag) const {
  return std::any_of(pending_.begin(), pending_.end(), [tag](const Pending& p) { return p.tag == tag; });
}

Result<std::size_t> ErrorFeedback::pendingIndex(std::uint64_t tag, const char* action) const {
  for (std::size_t i = 0; i < pending_.size(); ++i)
    if (pending_[i].tag == tag) return i;
  return Status{StatusCode::kInvalidArgument,
                std::string("error feedback: nothing to ") + action + " (update " + std::to_string(tag) + ")"};
}

Status ErrorFeedback::commit(std::uint64_t tag) {
  auto at = pendingIndex(tag, "commit");
  if (!at) return at.status();
  const double pendingNorm = pending_[*at].norm;
  pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(*at));
  missed_ = 0;
  const double norm = std::sqrt(detail::sumSquares(memory_.data(), memory_.size()));
  lastRatio_ = pendingNorm > 0.0 ? norm / pendingNorm : 0.0;
  if (options_.maxErrorRatio > 0.0 && norm > options_.maxErrorRatio * pendingNorm) {
    const auto scale = static_cast<float>(options_.maxErrorRatio * pendingNorm / norm);
    for (float& e : memory_)
      e *= scale;
  }
  return Status::ok();
}

Status ErrorFeedback::rollback(std::uint64_t tag) {
  auto at = pendingIndex(tag, "roll back");
  if (!at) return at.status();
  // e <- e + q: the update's input stays in the memory.
  STARLING_RETURN_IF_ERROR(addScaled(pending_[*at].q, 1.0f, memory_));
  pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(*at));
  return Status::ok();
}

Status ErrorFeedback::missedRounds(std::uint32_t n) {
  if (hasPending()) {
    return {StatusCode::kInvalidArgument, "error feedback: resolve the pending updates before recording missed rounds"};
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
  pending_.clear();
  missed_ = 0;
  lastRatio_ = 0.0;
}

Status ErrorFeedback::restore(std::span<const float> saved) {
  if (saved.size() != memory_.size())
    return Status(StatusCode::kInvalidArgument, "saved memory has " + std::to_string(saved.size()) +
                                                    " elements, this memory has " + std::to_string(memory_.size()));
  std::copy(saved.begin(), saved.end(), memory_.begin());
  pending_.clear();
  missed_ = 0;
  return Status::ok();
}

}  // namespace starling::compression
