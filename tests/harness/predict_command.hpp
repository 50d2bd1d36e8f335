#pragma once
// `starling-sim predict`: seconds per round and time to N rounds for a federation of
// devices like a profiled one (predict.hpp, docs/predict.md).
//
//   starling-sim predict --profile FILE [--clients N] [--per-round K] [--tau T] [--batch-size B]
//       [--uplink-mbps U --downlink-mbps D --latency-ms L] [--coordinator-mbps C]
//       [--over-selection F] [--deadline-s S] [--overlap] [--mode sync|async --concurrency M
//       --buffer-size B] [--cores C --background-load L] [--eval-examples E] [--rounds R]
//
// Prints one line of key=value figures (seconds per round first).

#include <CLI/CLI.hpp>
#include <string>

#include "predict.hpp"

namespace starling::sim {

struct PredictCommand {
  std::string profile;
  std::string mode = "sync";
  double wireNsPerByte = 0;  // fleet.wireCpuSecondsPerByte in the flag's unit
  double storeMs = 0;        // fleet.storeSeconds in the flag's unit
  PredictFleet fleet;
};

// Adds the subcommand and its flags to app; the result is parsed() after CLI11_PARSE.
CLI::App* addPredictCommand(CLI::App& app, PredictCommand& command);

// Runs a parsed command: the line on stdout, errors on stderr as "starling-sim predict:
// ..."; returns the exit code.
int runPredictCommand(const PredictCommand& command);

}  // namespace starling::sim
