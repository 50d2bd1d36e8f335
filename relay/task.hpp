#pragma once
// The task a relay (starling-relay) runs for its own clients, made from the
// coordinator's Welcome: the same model, initialization, local training and
// compression as the coordinator's clients get, with the relay's own rounds (how many
// of its clients per round, their deadline, and how many local rounds it runs per
// assignment from the coordinator). docs/relay.md.

#include <cstdint>
#include <string>
#include <utility>

#include "starling/coordinator/round_engine.hpp"
#include "starling/coordinator/task.hpp"
#include "starling/util/status.hpp"
#include "starling/wire/messages.hpp"

namespace starling::relay {

// The relay's own settings for the rounds with its clients.
struct RelayRounds {
  uint32_t clientsPerRound = 10;  // K of each local round
  double overSelection = 1.3;
  uint32_t minClients = 0;  // idle clients before a local round starts (0 = K)
  int64_t deadlineMs = 60'000;
  uint32_t localRounds = 1;       // local rounds per assignment from the coordinator
  uint32_t heartbeatMs = 30'000;  // told to the relay's clients
};

// The engine and task of the relay's downstream federation. kUnsupported for a task
// that scales features or agrees a categorical vocabulary in a statistics round (a
// relay does not pass statistics rounds on); kMalformed for a Welcome without its
// training or compression settings (a walking-skeleton coordinator).
Result<std::pair<coordinator::EngineConfig, coordinator::TaskConfig>> downstreamTask(const wire::WelcomeMsg& upstream,
                                                                                     const RelayRounds& rounds);

}  // namespace starling::relay
