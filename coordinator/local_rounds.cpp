#include "starling/coordinator/local_rounds.hpp"

#include <algorithm>

namespace starling::coordinator {

void LocalRoundsTally::count(const RoundSummary& s) {
  if (!s.committed || s.participants.empty()) return;
  ++rounds_.rounds;
  uint32_t steps = 0;
  for (const ParticipantResult& p : s.participants) {
    if (p.outcome != ParticipantOutcome::kAccepted && p.outcome != ParticipantOutcome::kLateApplied) continue;
    rounds_.examples += p.examples;
    steps = std::max(steps, p.steps);
    lossStartSum_ += double(p.examples) * p.lossStart;
    lossEndSum_ += double(p.examples) * p.lossEnd;
  }
  rounds_.steps += steps;
}

LocalRounds LocalRoundsTally::take(std::span<const float> model) {
  LocalRounds out = std::move(rounds_);
  out.model.assign(model.begin(), model.end());
  if (out.examples > 0) {
    out.lossStart = lossStartSum_ / double(out.examples);
    out.lossEnd = lossEndSum_ / double(out.examples);
    out.examples = (out.examples + out.rounds / 2) / std::max<uint32_t>(out.rounds, 1);  // a round's
  }
  reset();
  return out;
}

}  // namespace starling::coordinator
