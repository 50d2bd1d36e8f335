#include "predict_command.hpp"

#include <fmt/format.h>

#include <iostream>

namespace starling::sim {

CLI::App* addPredictCommand(CLI::App& app, PredictCommand& c) {
  CLI::App* sub =
      app.add_subcommand("predict",
                         "seconds per round and time to N rounds of a federation of devices like the profiled one "
                         "(starling-client --profile; docs/predict.md)");
  sub->option_defaults()->always_capture_default();
  PredictFleet& f = c.fleet;
  sub->add_option("--profile", c.profile, "the device's profile (starling-client --profile OUT.json)")->required();
  sub->add_option("--clients", f.clients, "N clients in the federation");
  sub->add_option("--per-round", f.perRound, "K clients per round (0 = N)");
  sub->add_option("--over-selection", f.overSelection, "clients selected = ceil(K x this)");
  sub->add_option("--deadline-s", f.deadlineS, "a sync round closes then with what arrived (0 = none)");
  sub->add_option("--tau", f.tau, "local steps per round");
  sub->add_option("--batch-size", f.batch, "minibatch of a local step");
  sub->add_option("--uplink-mbps", f.uplinkMbps, "each client's link towards the coordinator, Mbit/s");
  sub->add_option("--downlink-mbps", f.downlinkMbps, "each client's link from the coordinator, Mbit/s");
  sub->add_option("--latency-ms", f.latencyMs, "one-way latency of each message, ms");
  sub->add_option("--coordinator-mbps", f.coordinatorMbps,
                  "the coordinator's link, each way, shared by concurrent transfers (0 = unlimited)");
  sub->add_option("--wire-cpu-ns-per-byte", c.wireNsPerByte,
                  "CPU per byte of a message at each end (TLS, framing), nanoseconds (0 = free)");
  sub->add_option("--cores", f.cores,
                  "clients and coordinator share this many cores (one machine; 0 = each client its own device)");
  sub->add_option("--background-load", f.backgroundLoad,
                  "other busy process groups (sessions: Linux autogroups) sharing those cores");
  sub->add_flag("--overlap", f.overlap, "Overlap Local-SGD: the next round's steps run while the update travels");
  sub->add_option("--mode", c.mode, "sync rounds, or async (FedBuff)")->check(CLI::IsMember({"sync", "async"}));
  sub->add_option("--concurrency", f.concurrency, "async: clients in flight (0 = N)");
  sub->add_option("--buffer-size", f.buffer, "async: updates per server step");
  sub->add_option("--rounds", f.rounds, "rounds (server steps) predicted");
  sub->add_option("--eval-examples", f.evalExamples, "the coordinator evaluates the model on this many examples");
  sub->add_option("--eval-every", f.evalEvery, "... every this many rounds");
  sub->add_option("--store-ms", c.storeMs,
                  "the coordinator's record of a committed round on disk, ms (bench-store measures it; 0 = free)");
  return sub;
}

int runPredictCommand(const PredictCommand& c) {
  auto fail = [](const std::string& message) {
    std::cerr << "starling-sim predict: " << message << "\n";
    return 1;
  };
  auto profile = client::readProfile(c.profile);
  if (!profile) return fail(profile.status().message());
  PredictFleet fleet = c.fleet;
  if (!(c.wireNsPerByte >= 0)) return fail("--wire-cpu-ns-per-byte cannot be negative");
  fleet.wireCpuSecondsPerByte = c.wireNsPerByte * 1e-9;
  fleet.storeSeconds = c.storeMs * 1e-3;
  fleet.async = c.mode == "async";
  auto p = predict(*profile, fleet);
  if (!p) return fail(p.status().message());
  std::cout << fmt::format(
      "s_per_round={:.6f} s_to_rounds={:.6f} rounds={} client_compute_s={:.4f} client_wall_s={:.4f} "
      "transfer_s={:.4f} commit_s={:.4f}\n",
      p->secondsPerRound, p->secondsToRounds, p->roundEnds.size(), p->clientComputeS, p->clientWallS, p->transferS,
      p->commitS);
  return 0;
}

}  // namespace starling::sim
