#pragma once
// Shared helpers of the store tests: a temporary directory removed at the end of a
// test, and records filled with distinct values so that a round trip compares every
// field.

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "starling/coordinator/store.hpp"

namespace starling::coordinator::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "starling-store-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline ClientRecord makeClient(int i) {
  ClientRecord c;
  c.id = "client-" + std::to_string(i);
  c.certFingerprint = "ab:cd:" + std::to_string(i);
  c.firstSeenMs = 1'700'000'000'000 + i;
  c.lastSeenMs = 1'700'000'100'000 + i;
  c.examples = 600 + i;
  c.speedExamplesPerS = 1500.5 + i;
  c.reliability = 0.75;
  c.roundsAssigned = 10 + i;
  c.roundsReturned = 8 + i;
  return c;
}

inline RoundRecord makeRound(uint64_t round) {
  RoundRecord r;
  r.round = round;
  r.status = RoundStatus::kCommitted;
  r.reason = "target reached";
  r.tau = 5 + static_cast<int64_t>(round);
  r.lr = 0.05;
  r.density = 0.01;
  r.densityDown = 0.1;
  r.selected = 13;
  r.returned = 11;
  r.accepted = 10;
  r.stragglers = 2;
  r.bytesUpRaw = 4'000'000;
  r.bytesUpWire = 80'000;
  r.bytesDownRaw = 5'200'000;
  r.bytesDownWire = 520'000;
  r.trainLossStart = 2.302585 / static_cast<double>(round + 1);
  if (round % 2 == 0) {
    r.testLoss = 0.5;
    r.testAccuracy = 0.8125;
  }
  r.startedMs = 1'700'000'000'000 + static_cast<int64_t>(round) * 10'000;
  r.endedMs = r.startedMs + 7'250;
  return r;
}

inline ParticipantRecord makeParticipant(uint64_t round, int client, ParticipantOutcome outcome,
                                         std::string reason = "") {
  ParticipantRecord p;
  p.round = round;
  p.clientId = "client-" + std::to_string(client);
  p.outcome = outcome;
  p.reason = std::move(reason);
  p.assignedMs = 1'700'000'000'000 + static_cast<int64_t>(round) * 10'000;
  if (outcome != ParticipantOutcome::kStraggler && outcome != ParticipantOutcome::kDropped) {
    p.returnedMs = p.assignedMs + 3'000 + client;
  }
  p.durationMs = 2'900 + client;
  p.steps = 5;
  p.examples = 160;
  p.lossStart = 2.3;
  p.lossEnd = 1.9;
  p.bytesUpRaw = 400'000;
  p.bytesUpWire = 8'000 + client;
  p.bytesDownWire = 52'000;
  p.sticky = client % 2 == 1;  // odd clients drawn from the sticky group
  p.selectionWeight = p.sticky ? 0.625 : 2.5;
  return p;
}

inline Checkpoint makeCheckpoint(uint64_t round, std::size_t size = 1000) {
  Checkpoint cp;
  cp.round = round;
  cp.model.resize(size);
  cp.serverMemory.resize(size);
  // One correctly rounded operation per value: no multiply-add the compiler might
  // fuse in one translation unit and not in another.
  for (std::size_t i = 0; i < size; ++i) {
    cp.model[i] = static_cast<float>(round * 1'000'003 + i) / 1000.0f;
    cp.serverMemory[i] = -static_cast<float>(i) / 4096.0f;
  }
  cp.model[0] = -0.0f;  // bit-exact, not just equal
  cp.engineState = std::string("controller\0tau=5;rng=", 21) + std::to_string(round);
  cp.vectors["model-average"].resize(size);
  cp.vectors["server-momentum"].resize(size);
  for (std::size_t i = 0; i < size; ++i) {
    cp.vectors["model-average"][i] = static_cast<float>(round) + static_cast<float>(i) / 8192.0f;
    cp.vectors["server-momentum"][i] = -static_cast<float>(i % 97) / 64.0f;
  }
  // Opaque to the store: bytes of every value, a NUL among them.
  for (std::size_t i = 0; i < 300; ++i)
    cp.catchUp.push_back(static_cast<uint8_t>((round * 31 + i * 7) & 0xff));
  return cp;
}

}  // namespace starling::coordinator::testing
