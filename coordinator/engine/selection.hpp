#pragma once
// Selection: who trains in the next round. It owns the decision of when a round is due
// (enough idle clients: minClients, default K) and which of the idle clients are
// picked: ceil(K x overSelection) of them, uniformly, or each independently with
// EngineConfig::samplingRate (sampling "poisson", differential privacy's
// amplification), or under sticky sampling
// (EngineConfig::stickyClients; GlueFL) round(stickyFraction x n) from the sticky
// group and the rest from the other idle clients, each pick with its selection weight
// (n / N) / P(selected) (1 under uniform sampling or without stickyReweight).
//
// State: the seeded generator (the engine state's "rng" line) and the sticky group,
// each member with the last round it was assigned ("sticky ID ROUND" lines).
//
// Deterministic: the same idle list (in the same order), round and state give the
// same picks. One thread at a time (the owner's).

#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "starling/coordinator/round_engine.hpp"
#include "starling/util/status.hpp"

namespace starling::coordinator {

class Selection {
 public:
  struct Pick {
    std::string id;
    bool sticky = false;  // drawn from the sticky group
    double weight = 1.0;  // the selection weight its aggregation weight is multiplied by
  };

  // Checks the settings it uses (stickyClients, stickyFraction).
  static Result<Selection> create(const EngineConfig& config);

  // Whether a round may start with this many idle clients.
  bool due(std::size_t idle) const;
  // Picks round `round`'s participants among `idle` (ids; the caller's order is part of
  // the determinism: the engine passes them ordered by id) and, under sticky sampling,
  // makes them the newest members of the group, the members assigned longest ago leaving.
  // `count` of them when given (the asynchronous modes fill the slots that are free),
  // else ceil(K x overSelection); fewer when fewer are idle.
  std::vector<Pick> select(std::vector<std::string> idle, uint64_t round, std::optional<std::size_t> count = {});
  // The same over pointers to the ids (which outlive the call): a large fleet's idle
  // list is not copied, only the picks' ids are.
  std::vector<Pick> select(std::vector<const std::string*> idle, uint64_t round, std::optional<std::size_t> count = {});

  // The sticky group's members, ordered by id; empty when sticky sampling is off.
  std::vector<std::string> group() const;

  // The engine state's lines: "rng" and, separately, the "sticky" lines.
  void writeRng(std::ostream& out) const;
  void writeGroup(std::ostream& out) const;
  // Reads the value of `key` when it is one of this part's lines ("rng", "sticky"):
  // true when the key is this part's (ok then says whether its value parsed).
  bool readState(const std::string& key, std::istream& in, bool& ok);

 private:
  explicit Selection(const EngineConfig& config);

  uint32_t clientsPerRound_, minClients_, stickyClients_;
  double overSelection_, stickyFraction_;
  bool stickyReweight_;
  double poissonRate_;  // EngineConfig::sampling "poisson": its rate; 0 = fixed-size
  uint64_t rng_;
  std::map<std::string, uint64_t> sticky_;  // member -> the last round it was assigned
};

}  // namespace starling::coordinator
