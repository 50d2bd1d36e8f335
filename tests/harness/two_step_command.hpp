#pragma once
// `starling-sim two-step`: the seeds' two-step placement problem (two_step.hpp) on a
// LIBSVM file or the power-law generator, from the command line.
//
//   starling-sim two-step (--data FILE | --power-law) [--workers 8] [--servers 8]
//       [--density 0] [--iterations 5] [--examples N --features D --tokens K
//       --exponent S --seed SEED] [--dump FILE] ...
//
// Prints the table and a last "summary:" line (twoStepTable).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "starling/data/synthetic.hpp"

#include "two_step.hpp"

namespace starling::sim {

struct TwoStepCommand {
  std::string data;       // a LIBSVM file (binary labels), or empty with powerLaw
  bool powerLaw = false;  // data::powerLawSparse with `generator`
  data::PowerLawOptions generator;
  TwoStepOptions options;
  std::string balance = "examples";     // step 1's: "examples" or "nonzeros"
  std::string graph = "bipartite-cut";  // step 1's METIS graph (coordinator::parseMetisGraph)
  std::string dump;                     // where to write twoStepDump(), if not empty
  // The time model in the flags' units (options.time gets them; TimeModel's defaults).
  double bandwidthGbps = TimeModel{}.bandwidth * 8 / 1e9;
  double latencyUs = TimeModel{}.latencySeconds * 1e6;
  double messageUs = TimeModel{}.messageSeconds * 1e6;
  double computeNs = TimeModel{}.computeSecondsPerNonZero * 1e9;
};

// Adds the subcommand and its flags to app; the result is parsed() after CLI11_PARSE.
CLI::App* addTwoStepCommand(CLI::App& app, TwoStepCommand& command);

// Runs a parsed command: the table on stdout, errors on stderr as "starling-sim
// two-step: ..."; returns the exit code.
int runTwoStepCommand(const TwoStepCommand& command);

}  // namespace starling::sim
