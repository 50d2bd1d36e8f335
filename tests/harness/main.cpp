// starling-sim: runs strategies side by side on a simulated fleet.
//
//   starling-sim --config examples/sim/strategies.toml --out sim-out [--only a,b] [--KEY VALUE ...]
//   mpirun -n R starling-sim --config ...   (the clients trained on R ranks; rank 0 writes
//                                            the same files, docs/simulation.md "On MPI")
//   starling-sim two-step (--data FILE | --power-law) [--workers W] [--servers S] ...
//                                             (two_step_command.hpp)
//   starling-sim predict --profile FILE [--clients N] [--tau T] ...  (predict_command.hpp)
//   starling-sim privacy (--sampling-rate Q | --sampling individual) --rounds T
//                        (--noise-multiplier S | --target-epsilon E)
//                                             (privacy_command.hpp)
//
// Writes, under --out: <strategy>.csv (one row per round), summary.txt (also
// printed), wall.txt (each strategy's wall and CPU seconds) and report.svg (accuracy
// against bytes and against virtual time). A progress line on stderr while it runs.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "predict_command.hpp"
#include "privacy_command.hpp"
#include "ranks.hpp"
#include "sim_config.hpp"
#include "two_step_command.hpp"

namespace {

using namespace starling;

int fail(const std::string& message) {
  std::cerr << "starling-sim: " << message << "\n";
  return 1;
}

bool writeFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  sim::Ranks ranks(argc, argv);
  // Every rank reads the same settings and loads the same fleet; only rank 0 prints and writes.
  const bool lead = ranks.rank() == 0;
  CLI::App app{"starling-sim: the coordinator's RoundEngine and the client runtime on a simulated fleet"};
  app.set_version_flag("--version", STARLING_VERSION);
  app.option_defaults()->always_capture_default();
  std::string configFile, outDir = "sim-out", only;
  app.add_option("--config", configFile, "TOML: [task] [train] [compression] [eval] [sim] and [[strategy]] tables");
  app.add_option("--out", outDir, "directory for the CSVs, summary.txt and report.svg");
  app.add_option("--only", only, "comma-separated strategy names to run (default: all)");
  bool quiet = false;
  app.add_flag("--quiet", quiet, "no progress line");
  coordinator::DaemonConfig base;
  sim::SimSettings settings;
  coordinator::ConfigBinder binder(app, base);
  sim::bindSimSettings(binder, settings);
  sim::TwoStepCommand twoStep;
  CLI::App* twoStepApp = sim::addTwoStepCommand(app, twoStep);
  sim::PredictCommand predict;
  CLI::App* predictApp = sim::addPredictCommand(app, predict);
  sim::PrivacyCommand privacy;
  CLI::App* privacyApp = sim::addPrivacyCommand(app, privacy);
  CLI11_PARSE(app, argc, argv);
  if (twoStepApp->parsed()) return lead ? sim::runTwoStepCommand(twoStep) : 0;
  if (predictApp->parsed()) return lead ? sim::runPredictCommand(predict) : 0;
  if (privacyApp->parsed()) return lead ? sim::runPrivacyCommand(privacy) : 0;
  if (!lead) quiet = true;

  std::vector<sim::Strategy> strategies;
  if (!configFile.empty()) {
    if (Status st = sim::loadConfig(configFile, binder, base, strategies); !st) return fail(st.message());
  } else {
    strategies.push_back(sim::strategyOf("default", base));
  }
  std::vector<std::string> names;
  std::stringstream list(only);
  for (std::string name; std::getline(list, name, ',');)
    names.push_back(name);
  if (Status st = sim::chooseStrategies(strategies, names); !st) return fail("--only: " + st.message());
  if (Status st = sim::checkSameData(strategies); !st) return fail(st.message());

  settings.testData = strategies.front().task.testData;
  auto fleet =
      sim::Fleet::create(settings, strategies.front().task.model,
                         coordinator::dataOptions(strategies.front().task, false), strategies.front().task.huberDelta);
  if (!fleet) return fail(fleet.status().message());
  for (auto& s : strategies)
    s.task.model = fleet->modelSpec();
  std::error_code ec;
  if (lead) std::filesystem::create_directories(outDir, ec);
  if (ec) return fail("cannot create " + outDir + ": " + ec.message());

  std::vector<sim::StrategyResult> results;
  for (const auto& strategy : strategies) {
    const uint64_t rounds = strategy.engine.rounds;
    auto progress = [&](const sim::RoundRow& r) {
      if (quiet) return;
      std::cerr << fmt::format("\r{:<20} round {:>4}/{} | virtual {:>9.1f} s | {:>9.2f} MB | acc {:>6} | tau {:>4} ",
                               strategy.name, r.round, rounds, r.virtualSeconds, double(r.totalBytes) / 1e6,
                               r.accuracy ? fmt::format("{:.2f}%", *r.accuracy * 100) : "-", r.tau)
                << std::flush;
    };
    auto result = sim::runStrategy(*fleet, strategy, progress, &ranks);
    if (!quiet) std::cerr << "\n";
    if (!result) {
      fail((ranks.size() > 1 ? fmt::format("rank {}: ", ranks.rank()) : "") + "strategy '" + strategy.name +
           "': " + result.status().message());
      if (ranks.size() > 1) ranks.abort(1);  // the other ranks wait for messages that will not come
      return 1;
    }
    if (!lead) continue;
    const auto csv = std::filesystem::path(outDir) / (strategy.name + ".csv");
    if (!writeFile(csv, sim::roundsCsv(*result))) return fail("cannot write " + csv.string());
    results.push_back(std::move(*result));
  }
  if (!lead) return 0;
  // Wall time of each strategy's rounds (data loading excluded), for bench/sim_mpi.sh.
  std::string walls = "strategy rounds wall_s cpu_s\n";
  for (const auto& r : results)
    walls += fmt::format("{} {} {:.3f} {:.3f}\n", r.name, r.rounds.size(), r.wallSeconds, r.cpuSeconds);
  const std::string summary = sim::summaryTable(results, settings.targetAccuracy);
  std::cout << summary;
  const auto dir = std::filesystem::path(outDir);
  if (!writeFile(dir / "summary.txt", summary)) return fail("cannot write summary.txt");
  if (!writeFile(dir / "wall.txt", walls)) return fail("cannot write wall.txt");
  if (!writeFile(dir / "report.svg", sim::reportSvg(results, settings.targetAccuracy)))
    return fail("cannot write report.svg");
  std::cerr << "wrote " << (dir / "report.svg").string() << ", summary.txt and one CSV per strategy\n";
  return 0;
}
