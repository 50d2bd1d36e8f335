#pragma once
// How a participant's part in a round ended: one enum for the engine
// (ParticipantResult::outcome) and the store (ParticipantRecord::outcome, the
// participants table's `outcome` column, by name). Header-only: the store and the
// engine share it without linking each other. Any thread.

#include <optional>
#include <string_view>

namespace starling::coordinator {

enum class ParticipantOutcome {
  kAccepted,       // its update was applied in its own round
  kStraggler,      // no update by the deadline (or the round was abandoned first)
  kDropped,        // it left, or was out of sync, while assigned
  kRejected,       // its update was refused (invalid, over the norm limit, round abandoned)
  kLateApplied,    // its late update was applied with a later round's aggregate
  kLateDiscarded,  // its late update was too stale to apply
};

// "accepted", "straggler", "dropped", "rejected", "late-applied", "late-discarded".
constexpr const char* participantOutcomeName(ParticipantOutcome outcome) {
  switch (outcome) {
    case ParticipantOutcome::kAccepted:
      return "accepted";
    case ParticipantOutcome::kStraggler:
      return "straggler";
    case ParticipantOutcome::kDropped:
      return "dropped";
    case ParticipantOutcome::kRejected:
      return "rejected";
    case ParticipantOutcome::kLateApplied:
      return "late-applied";
    case ParticipantOutcome::kLateDiscarded:
      return "late-discarded";
  }
  return "unknown";
}

constexpr std::optional<ParticipantOutcome> parseParticipantOutcome(std::string_view name) {
  for (ParticipantOutcome o :
       {ParticipantOutcome::kAccepted, ParticipantOutcome::kStraggler, ParticipantOutcome::kDropped,
        ParticipantOutcome::kRejected, ParticipantOutcome::kLateApplied, ParticipantOutcome::kLateDiscarded}) {
    if (name == participantOutcomeName(o)) return o;
  }
  return std::nullopt;
}

}  // namespace starling::coordinator
