#include "server_optimizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include "engine/shards.hpp"

namespace starling::coordinator {

Result<ServerOptimizer> ServerOptimizer::create(const EngineConfig& c, std::size_t dim, Shards* shards) {
  if (!(c.serverLr > 0) || !std::isfinite(c.serverLr))
    return Status(StatusCode::kInvalidArgument, "the server learning rate must be positive");
  if (!(c.serverMomentum >= 0 && c.serverMomentum < 1))
    return Status(StatusCode::kInvalidArgument, "server momentum must be in [0, 1)");
  if (!(c.modelEma >= 0 && c.modelEma < 1))
    return Status(StatusCode::kInvalidArgument, "the model EMA decay must be in [0, 1) (0 = off)");
  if (c.serverOptimizer != "sgd" && c.serverOptimizer != "adam" && c.serverOptimizer != "yogi")
    return Status(StatusCode::kInvalidArgument, "server optimizer must be sgd, adam or yogi");
  if (c.serverOptimizer != "sgd") {
    if (c.serverMomentum > 0 || c.extrapolate)
      return Status(StatusCode::kInvalidArgument,
                    "server momentum and extrapolate belong to the sgd server optimizer, not " + c.serverOptimizer);
    if (!(c.serverBeta1 >= 0 && c.serverBeta1 < 1) || !(c.serverBeta2 >= 0 && c.serverBeta2 < 1) ||
        !(c.serverEps > 0) || !std::isfinite(c.serverEps))
      return Status(StatusCode::kInvalidArgument, "server betas must be in [0, 1) and eps positive");
  }
  return ServerOptimizer(c, dim, shards);
}

ServerOptimizer::ServerOptimizer(const EngineConfig& c, std::size_t dim, Shards* shards)
    : dim_(dim),
      rule_(c.serverOptimizer == "adam"   ? Rule::kAdam
            : c.serverOptimizer == "yogi" ? Rule::kYogi
                                          : Rule::kSgd),
      lr_(c.serverLr),
      momentum_(c.serverMomentum),
      beta1_(c.serverBeta1),
      beta2_(c.serverBeta2),
      eps_(c.serverEps),
      ema_(c.modelEma),
      extrapolate_(c.extrapolate),
      masking_(c.momentumMasking),
      shards_(shards) {}

void ServerOptimizer::forRanges(std::size_t dim, const std::function<void(std::size_t, std::size_t)>& fn) {
  if (shards_)
    shards_->forRanges(fn);
  else
    fn(0, dim);
}

double ServerOptimizer::apply(std::span<float> delta, std::optional<double> spread) {
  double step = lr_;
  if (extrapolate_ && spread) {
    // FedExP: eta_g = max(1, sum_k (w_k / W) ||a_k||^2 / (2 ||Delta||^2)). One sum in
    // order on the calling thread, whatever the shards: a sum by shard would round
    // differently.
    double meanSq = 0;
    for (float x : delta)
      meanSq += double(x) * double(x);
    if (meanSq > 0 && std::isfinite(*spread)) step *= std::max(1.0, *spread / (2.0 * meanSq));
  }
  const double reported = step;
  // The rest is element-wise, by shard: coordinate i sees the same operations in the
  // same order whatever the cut.
  if (rule_ != Rule::kSgd) {
    const bool yogi = rule_ == Rule::kYogi;
    const auto eps = static_cast<float>(eps_);
    if (velocity_.size() != delta.size()) velocity_.assign(delta.size(), 0.0f);
    if (secondMoment_.size() != delta.size()) secondMoment_.assign(delta.size(), yogi ? eps * eps : 0.0f);
    const auto b1 = static_cast<float>(beta1_);
    const auto b2 = static_cast<float>(beta2_);
    const auto eta = static_cast<float>(step);
    forRanges(delta.size(), [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        const float g = delta[i];
        const float g2 = g * g;
        float& m = velocity_[i];
        float& v = secondMoment_[i];
        m = b1 * m + (1.0f - b1) * g;
        if (yogi)
          v -= (1.0f - b2) * g2 * (v > g2 ? 1.0f : (v < g2 ? -1.0f : 0.0f));
        else
          v = b2 * v + (1.0f - b2) * g2;
        delta[i] = eta * m / (std::sqrt(v) + eps);
      }
    });
    return reported;  // the step is applied above
  }
  if (momentum_ > 0 && velocity_.size() != delta.size()) velocity_.assign(delta.size(), 0.0f);
  const auto beta = static_cast<float>(momentum_);
  const auto eta = static_cast<float>(step);
  if (!(momentum_ > 0) && step == 1.0) return reported;
  forRanges(delta.size(), [&](std::size_t begin, std::size_t end) {
    if (momentum_ > 0) {
      for (std::size_t i = begin; i < end; ++i) {
        velocity_[i] = beta * velocity_[i] + delta[i];
        delta[i] = velocity_[i];
      }
    }
    if (step != 1.0)
      for (std::size_t i = begin; i < end; ++i)
        delta[i] *= eta;
  });
  return reported;
}

void ServerOptimizer::broadcastSent(const compression::Compressed& q) {
  if (!velocity_.empty() && masking_ && q.encoding == compression::Encoding::kTopK)
    for (uint32_t i : q.indices)
      velocity_[i] = 0.0f;
}

void ServerOptimizer::modelCommitted(std::span<const float> model) {
  if (!(ema_ > 0)) return;
  if (average_.empty()) {
    average_.assign(model.begin(), model.end());
  } else {
    const auto a = static_cast<float>(ema_);
    forRanges(model.size(), [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i)
        average_[i] = a * average_[i] + (1.0f - a) * model[i];
    });
  }
}

void ServerOptimizer::saveVectors(std::map<std::string, std::vector<float>>& out) const {
  if (!velocity_.empty()) out[rule_ == Rule::kSgd ? "server-momentum" : "server-first-moment"] = velocity_;
  if (!secondMoment_.empty()) out["server-second-moment"] = secondMoment_;
  if (!average_.empty()) out["model-average"] = average_;
}

Status ServerOptimizer::restoreVectors(const std::map<std::string, std::vector<float>>& vectors) {
  const bool sgd = rule_ == Rule::kSgd;
  const std::pair<const char*, std::vector<float>*> used[] = {
      {"server-momentum", sgd && momentum_ > 0 ? &velocity_ : nullptr},
      {"server-first-moment", !sgd ? &velocity_ : nullptr},
      {"server-second-moment", !sgd ? &secondMoment_ : nullptr},
      {"model-average", ema_ > 0 ? &average_ : nullptr},
  };
  for (const auto& [name, values] : vectors) {
    if (values.size() != dim_)
      return Status(StatusCode::kMalformed,
                    fmt::format("checkpoint's vector '{}' has {} values, the model {}", name, values.size(), dim_));
    const auto* slot = std::find_if(std::begin(used), std::end(used), [&](const auto& u) { return name == u.first; });
    if (slot == std::end(used))
      return Status(StatusCode::kMalformed, fmt::format("checkpoint holds an unknown vector '{}'", name));
    if (slot->second != nullptr) *slot->second = values;
  }
  return Status::ok();
}

}  // namespace starling::coordinator
