#pragma once
// FederationObserver: what a Federation tells a watcher (the dashboard's LiveState,
// docs/dashboard.md) as it happens. Every call comes on the federation's strand, in the
// order of events, and must return quickly: an observer copies what it needs under
// its own lock and never calls back into the federation. Times are wall clock, ms
// since the Unix epoch.

#include <cstdint>
#include <string>
#include <vector>

#include "starling/coordinator/store.hpp"

namespace starling::coordinator {

class FederationObserver {
 public:
  virtual ~FederationObserver() = default;
  // A client (or relay) was welcomed; `examples` as its Hello announced.
  virtual void clientJoined(const std::string& id, const std::string& role, const std::string& address,
                            uint64_t examples, int64_t atMs) = 0;
  // Its connection ended (`why`: how).
  virtual void clientLeft(const std::string& id, const std::string& why, int64_t atMs) = 0;
  // A client turned away at Hello (also recorded in the store).
  virtual void clientRefused(const RefusalRecord& refusal) = 0;
  // An assignment went out: train round `round`, answer by `deadlineMs`.
  virtual void assigned(const std::string& id, uint64_t round, int64_t atMs, int64_t deadlineMs) = 0;
  // An update for `round` arrived (before the engine's verdict).
  virtual void updateArrived(const std::string& id, uint64_t round, int64_t atMs) = 0;
  // The verdict the client was sent on its update for `round`.
  virtual void verdict(const std::string& id, uint64_t round, bool accepted, const std::string& reason) = 0;
  // A round is on disk (committed or abandoned), with its participants' records.
  virtual void roundRecorded(const RoundRecord& round, const std::vector<ParticipantRecord>& participants) = 0;
  // The evaluation recorded for a committed round (it may come after later rounds'
  // records: the evaluation runs while the next round trains).
  virtual void evaluated(uint64_t round, const EvaluationRecord& evaluation) = 0;
  // Training ended (`why`: "training complete", or the error that stopped it).
  virtual void finished(const std::string& why) = 0;
};

}  // namespace starling::coordinator
