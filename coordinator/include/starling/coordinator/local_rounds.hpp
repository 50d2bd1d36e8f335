#pragma once
// A relay's local rounds (docs/relay.md): between two assignments from its coordinator
// a relay's RoundEngine commits a few rounds with its own clients; what they trained
// becomes the relay's one update upwards. The tally is shared by starling-relay (through
// Federation::trainLocalRounds) and the simulator's relays, so both weigh and describe
// the relay's update alike.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "starling/coordinator/round_engine.hpp"

namespace starling::coordinator {

// What a relay's local rounds trained: the model they produced; the examples of the
// updates they applied, per round (the relay's update weighs like one round of its
// clients); the local steps the model took (each round's most, summed); the
// examples-weighted mean losses.
struct LocalRounds {
  std::vector<float> model;
  uint32_t rounds = 0;
  uint64_t examples = 0;
  uint32_t steps = 0;
  double lossStart = 0;
  double lossEnd = 0;
  // The relay's connected clients when the rounds ended (starling-relay --sparse-rows):
  // the union of their rows, ascending; anyDense: one of them trains the whole model.
  std::vector<uint32_t> clientRows;
  bool anyDense = false;
  // Each connected client's row set as it offered it (Hello.row_set, row_bucket): what
  // the relay tells its coordinator for placement (empty bytes: it offered none).
  struct Member {
    std::string id;
    std::vector<uint8_t> rowSet;
    uint32_t rowBucket = 0;
  };
  std::vector<Member> members;
};

class LocalRoundsTally {
 public:
  // A round the relay's engine ended: a committed one with participants counts (the
  // round that adopts the upstream model has none), with its applied updates.
  void count(const RoundSummary& summary);
  // What the rounds counted since the last take() trained, ending at `model`; the tally
  // starts again.
  LocalRounds take(std::span<const float> model);
  void reset() { *this = LocalRoundsTally{}; }

 private:
  LocalRounds rounds_;
  double lossStartSum_ = 0, lossEndSum_ = 0;
};

}  // namespace starling::coordinator
