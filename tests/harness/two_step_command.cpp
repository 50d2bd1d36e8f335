#include "two_step_command.hpp"

#include <fmt/format.h>

#include <fstream>
#include <iostream>

#include "starling/data/load.hpp"

namespace starling::sim {

CLI::App* addTwoStepCommand(CLI::App& app, TwoStepCommand& c) {
  CLI::App* sub = app.add_subcommand(
      "two-step",
      "the seeds' two-step placement (docs/placement.md): examples to workers, then rows to servers, METIS against "
      "random and hash, with traffic and a modelled iteration time");
  sub->option_defaults()->always_capture_default();
  TwoStepOptions& o = c.options;
  auto* data = sub->add_option("--data", c.data, "a sparse LIBSVM file with binary labels");
  auto* powerLaw = sub->add_flag("--power-law", c.powerLaw, "the power-law generator (data/synthetic.hpp) instead");
  data->excludes(powerLaw);
  sub->add_option("--examples", c.generator.examples, "power law: examples");
  sub->add_option("--features", c.generator.features, "power law: features (the hashed space)");
  sub->add_option("--tokens", c.generator.tokens, "power law: tokens drawn per example");
  sub->add_option("--exponent", c.generator.exponent, "power law: Zipf exponent s");
  sub->add_option("--seed", c.generator.seed, "power law: the generator's seed");
  sub->add_option("--workers", o.workers, "workers W");
  sub->add_option("--servers", o.servers, "parameter servers S");
  sub->add_option("--density", o.density, "top-k density of each worker's push over its rows (0: every row)");
  sub->add_option("--iterations", o.iterations, "training iterations measured");
  sub->add_option("--learning-rate", o.learningRate, "of the gradient steps");
  sub->add_option("--tolerance", o.tolerance, "max/mean - 1 of step 1's balance and of METIS's server load");
  sub->add_option("--placement-seed", o.seed, "random's shuffle and METIS's seed");
  sub->add_option("--graph", c.graph, "step 1's METIS graph: bipartite-cut, bipartite-volume or clients");
  sub->add_option("--balance", c.balance, "step 1 balances examples or nonzeros (the compute) per worker")
      ->check(CLI::IsMember({"examples", "nonzeros"}));
  sub->add_option("--bandwidth-gbps", c.bandwidthGbps, "time model: a node's bandwidth, Gbit/s");
  sub->add_option("--latency-us", c.latencyUs, "time model: one-way latency, microseconds");
  sub->add_option("--message-us", c.messageUs, "time model: per message at each end, microseconds");
  sub->add_option("--compute-ns", c.computeNs, "time model: gradient time per non-zero, nanoseconds");
  sub->add_option("--dump", c.dump, "write every combination's placement and the rows each worker moved to this file");
  return sub;
}

int runTwoStepCommand(const TwoStepCommand& c) {
  auto fail = [](const std::string& message) {
    std::cerr << "starling-sim two-step: " << message << "\n";
    return 1;
  };
  if (c.data.empty() == !c.powerLaw) return fail("give --data FILE or --power-law");
  std::string description = c.data;
  auto dataset = [&]() -> Result<data::Dataset> {
    if (!c.powerLaw) {
      data::DataOptions options;
      options.task = data::TaskKind::kBinary;
      return data::loadData(c.data, options);
    }
    description = fmt::format("power law ({} examples, K = {} tokens, s = {}, seed {})", c.generator.examples,
                              c.generator.tokens, c.generator.exponent, c.generator.seed);
    return data::powerLawSparse(c.generator);
  }();
  if (!dataset) return fail(dataset.status().message());
  TwoStepOptions options = c.options;
  auto graph = coordinator::parseMetisGraph(c.graph);
  if (!graph) return fail("--graph: " + graph.status().message());
  options.graph = *graph;
  options.balance = c.balance == "nonzeros" ? Balance::kNonZeros : Balance::kExamples;
  options.time.bandwidth = c.bandwidthGbps * 1e9 / 8;
  options.time.latencySeconds = c.latencyUs * 1e-6;
  options.time.messageSeconds = c.messageUs * 1e-6;
  options.time.computeSecondsPerNonZero = c.computeNs * 1e-9;
  auto report = runTwoStep(*dataset, description, options);
  if (!report) return fail(report.status().message());
  std::cout << twoStepTable(*report) << std::flush;
  if (!c.dump.empty()) {
    std::ofstream out(c.dump, std::ios::binary);
    out << twoStepDump(*report);
    if (!out) return fail("cannot write " + c.dump);
  }
  return 0;
}

}  // namespace starling::sim
