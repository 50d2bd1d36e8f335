#pragma once
// LiveState: what the dashboard shows (docs/dashboard.md), kept up to date by the
// Federation (a FederationObserver) and read by the HTTP threads: the task, the round
// in flight and its participants, the rounds so far, the troubled clients, the
// connected clients and the recent refusals. The history starts from the store's
// report, so a restarted coordinator shows every round since the task began.
//
// Threading: every method locks; observer calls come on the federation's strand,
// readers on the HTTP server's threads.

#include <prometheus/histogram.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "starling/coordinator/observer.hpp"
#include "starling/coordinator/report.hpp"

namespace starling::coordinator {

// The task as the dashboard's header states it.
struct DashboardTask {
  std::string name;
  std::string model;
  std::string kind;  // classification, binary, regression
  std::string mode;  // sync, async, ssp, dssp
  uint64_t rounds = 0;
  uint32_t clientsPerRound = 0;
  bool privacy = false;
  std::string database;
};

// The totals /metrics exports (metrics.cpp), read under one lock.
struct LiveCounts {
  uint64_t currentRound = 0;    // the newest round assigned
  uint64_t committedRound = 0;  // the newest round committed
  int64_t roundsCommitted = 0, roundsAbandoned = 0;
  std::map<std::string, int64_t> participants;  // by outcome ("accepted", "straggler", ...)
  int64_t refusals = 0;
  int64_t bytesUpWire = 0, bytesDownWire = 0, bytesUpRaw = 0, bytesDownRaw = 0;
  std::optional<double> accuracy, loss, rmse, epsilon;  // of the newest evaluated round; epsilon spent
  std::size_t clientsConnected = 0;
  std::map<std::string, std::size_t> clientsByRole;
  bool finished = false;
  prometheus::ClientMetric roundDuration;  // the histogram of round durations, in seconds
};

class LiveState : public FederationObserver {
 public:
  explicit LiveState(DashboardTask task);

  // The rounds, participants and refusals recorded before this run (loadReport).
  void seed(const ReportData& history);

  void clientJoined(const std::string& id, const std::string& role, const std::string& address, uint64_t examples,
                    int64_t atMs) override;
  void clientLeft(const std::string& id, const std::string& why, int64_t atMs) override;
  void clientRefused(const RefusalRecord& refusal) override;
  void assigned(const std::string& id, uint64_t round, int64_t atMs, int64_t deadlineMs) override;
  void updateArrived(const std::string& id, uint64_t round, int64_t atMs) override;
  void verdict(const std::string& id, uint64_t round, bool accepted, const std::string& reason) override;
  void roundRecorded(const RoundRecord& round, const std::vector<ParticipantRecord>& participants) override;
  void evaluated(uint64_t round, const EvaluationRecord& evaluation) override;
  void finished(const std::string& why) override;

  // GET /api/state: the whole view as one JSON object (docs/dashboard.md lists its
  // fields). `nowMs`: the wall clock, for the deadlines' countdown.
  std::string stateJson(int64_t nowMs) const;
  // GET /api/plots.svg: the rounds' plots (roundsFigure), drawn again only after a round
  // or an evaluation was recorded; `version` is what stateJson's "plots_version" says.
  std::pair<std::string, uint64_t> plotsSvg() const;
  LiveCounts counts() const;

  // At most this many rows of the lists the page shows (connected clients, troubled
  // clients); the totals count every one.
  static constexpr std::size_t kMaxListed = 200;
  static constexpr std::size_t kMaxRefusals = 20;
  static constexpr std::size_t kMaxRows = 2000;  // participants kept (kMaxListed shown, newest rounds first)

 private:
  struct Participant {
    std::string state;  // assigned, returned, accepted, rejected, then the stored outcome
    std::string reason;
    int64_t assignedMs = 0;
    std::optional<int64_t> returnedMs;
    int64_t deadlineMs = 0;
    bool final = false;  // the round is recorded (or the verdict was a rejection)
  };
  struct Connected {
    std::string role, address;
    uint64_t examples = 0;
    int64_t sinceMs = 0;
  };
  void addRound(const RoundRecord& round);  // history, counts, histogram
  void noteEvaluated(std::size_t index);    // rounds_[index] has test figures
  void addParticipant(const ParticipantRecord& p);

  mutable std::mutex mu_;
  DashboardTask task_;
  std::vector<RoundRecord> rounds_;  // in order of recording
  // Totals over rounds_, kept as rounds are added.
  int64_t committed_ = 0, abandoned_ = 0;
  uint64_t committedRound_ = 0;
  int64_t bytesUpWire_ = 0, bytesDownWire_ = 0, bytesUpRaw_ = 0, bytesDownRaw_ = 0;
  std::optional<double> epsilon_;
  std::optional<std::size_t> evaluatedAt_;                            // the newest committed round with test figures
  std::map<std::pair<uint64_t, std::string>, Participant> inFlight_;  // (round, client)
  std::map<std::string, ClientTrouble> trouble_;
  std::map<std::string, Connected> connected_;
  std::vector<RefusalRecord> refusals_;  // the newest kMaxRefusals
  int64_t refusalCount_ = 0;
  std::map<std::string, int64_t> outcomes_;
  uint64_t currentRound_ = 0;
  std::string finished_;
  uint64_t version_ = 0;  // bumped when rounds_ changes
  prometheus::Histogram roundSeconds_;
  mutable std::string plots_;
  mutable uint64_t plotsVersion_ = ~uint64_t{0};
};

}  // namespace starling::coordinator
