// RunExport: starling-sim --export-dir (see export.hpp).
#include "export.hpp"

#include <fmt/format.h>

#include <filesystem>

namespace starling::sim {
namespace {

Status ioError(const std::string& path) {
  return Status(StatusCode::kIo, "cannot write " + path);
}

void putU32(std::ofstream& out, uint32_t v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}

bool sparseOrDense(const std::string& name) {
  return name == "identity" || name == "fp16" || name == "topk" || name == "topk-sampled" || name == "randk";
}

// The first setting that keeps the run from being replayed, or "".
std::string unsupported(const SimSettings& s, const Strategy& dc, std::size_t clients) {
  const coordinator::EngineConfig& e = dc.engine;
  const coordinator::TaskConfig& t = dc.task;
  if (s.dropout > 0) return "sim.dropout must be 0";
  if (!s.availabilityTrace.empty()) return "sim.availability-trace must be empty";
  if (s.trainExamples != 0 || s.testExamples != 0) return "sim.train-examples and sim.test-examples must be 0 (all)";
  if (e.clientsPerRound != clients) return fmt::format("clients-per-round must be the {} clients with data", clients);
  if (e.overSelection != 1.0) return "over-selection must be 1";
  if (e.stickyClients != 0) return "sticky sampling must be off";
  if (e.warmupRounds != 0) return "warm-up must be off";
  if (e.adaptiveTau) return "adaptive tau must be off";
  if (e.serverOptimizer != "sgd" || e.serverMomentum != 0 || e.extrapolate || e.senderMean)
    return "the server step must be plain sgd (no momentum, extrapolation or sender mean)";
  if (e.modelEma != 0) return "model EMA must be off";
  if (e.modelMantissaBits != 23) return "model mantissa bits must be 23";
  if (e.downlinkShared != 0) return "the shared downlink mask must be off";
  if (e.downlinkErrorCap != 0 || t.uplinkErrorCap != 0) return "error caps must be 0";
  if (!sparseOrDense(e.uplink) || !sparseOrDense(e.downlink))
    return "compressors must be identity, fp16, topk, topk-sampled or randk";
  if (t.prioritySampling) return "priority sampling must be off";
  if (t.clipNorm != 0 || t.proxMu != 0) return "clipping and FedProx must be off";
  if (t.evalEvery != 1) return "eval-every must be 1";
  if (e.clipNorm != 0 || e.sampling != "fixed") return "differential privacy and poisson sampling must be off";
  if (e.aggregation != "mean" || e.serverClipNorm != 0) return "the aggregation must be the mean, unclipped";
  if (s.attackers != 0 && s.attack != "none") return "sim.attack must be none";
  return "";
}

}  // namespace

Result<std::unique_ptr<RunExport>> RunExport::open(const std::string& dir, const Fleet& fleet, const Strategy& strategy,
                                                   const model::Model& initial) {
  std::size_t clients = 0;
  for (const auto& c : fleet.clients())
    clients += c.examples.empty() ? 0 : 1;
  const Strategy& dc = strategy;
  if (std::string why = unsupported(fleet.settings(), dc, clients); !why.empty())
    return Status(StatusCode::kInvalidArgument,
                  "--export-dir: strategy '" + strategy.name + "' cannot be replayed: " + why);
  const std::string out = (std::filesystem::path(dir) / strategy.name).string();
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return Status(StatusCode::kIo, "cannot create " + out + ": " + ec.message());
  std::unique_ptr<RunExport> x(new RunExport(out, fleet));

  const coordinator::EngineConfig& e = dc.engine;
  const coordinator::TaskConfig& t = dc.task;
  {
    const std::string path = out + "/config.txt";
    std::ofstream f(path);
    f << fmt::format(
        "model = {}\nclients = {}\nrounds = {}\nbatch_size = {}\nlr = {:.9g}\nlr_decay = {:.17g}\n"
        "momentum = {:.9g}\nweight_decay = {:.9g}\ntau = {}\nserver_lr = {:.17g}\n"
        "uplink = {}\nuplink_density = {:.17g}\ndownlink = {}\ndownlink_density = {:.17g}\n"
        "fp16_values = {}\nuplink_ternary = {}\ndownlink_ternary = {}\nerror_feedback = {}\n"
        "catch_up_by_value = {}\nclients_initialize = {}\nseed = {}\npartition = {}\nfleet_seed = {}\n",
        t.model, clients, e.rounds, t.batchSize, e.lr, e.lrDecay, t.momentum, t.weightDecay, e.tau, e.serverLr,
        e.uplink, e.uplinkDensity, e.downlink, e.downlinkDensity, int(e.fp16Values), int(e.uplinkTernary),
        int(e.downlinkTernary), int(e.errorFeedback), int(e.catchUpByValue), int(e.clientsInitialize), e.seed,
        fleet.settings().partition, fleet.settings().seed);
    if (!f) return ioError(path);
  }
  STARLING_RETURN_IF_ERROR(initial.save(out + "/initial.model"));
  {
    const std::string path = out + "/shards.u32";
    std::ofstream f(path, std::ios::binary);
    putU32(f, static_cast<uint32_t>(fleet.clients().size()));
    for (const auto& c : fleet.clients()) {
      putU32(f, static_cast<uint32_t>(c.examples.size()));
      f.write(reinterpret_cast<const char*>(c.examples.data()),
              static_cast<std::streamsize>(c.examples.size() * sizeof(uint32_t)));
    }
    if (!f) return ioError(path);
  }
  x->batches_.open(out + "/batches.u32", std::ios::binary);
  x->updates_.open(out + "/updates.csv");
  x->updates_ << "round,client,steps,examples,lr,uplink_seed,payload_up\n";
  x->rounds_.open(out + "/rounds.csv");
  x->rounds_ << "round,committed,accepted,accuracy,test_loss,payload_up,payload_down,frames_up,frames_down,"
                "downlink_seed\n";
  if (!x->batches_ || !x->updates_ || !x->rounds_) return ioError(out + "/{batches.u32,updates.csv,rounds.csv}");
  return x;
}

Status RunExport::recordUpdate(uint64_t round, std::size_t client, uint32_t steps, uint32_t batchSize,
                               uint64_t examples, float lr, uint64_t uplinkSeed, uint64_t payloadBytes) {
  const std::span<const uint32_t> shard = fleet_.clients()[client].examples;
  if (batch_.size() != std::size_t(steps) * batchSize)
    return Status(StatusCode::kInternal, fmt::format("--export-dir: client {} round {}: {} batch indices for {} x {}",
                                                     client, round, batch_.size(), steps, batchSize));
  for (uint32_t& i : batch_) {
    if (i >= shard.size()) return Status(StatusCode::kInternal, "--export-dir: a batch index outside the shard");
    i = shard[i];
  }
  putU32(batches_, static_cast<uint32_t>(round));
  putU32(batches_, static_cast<uint32_t>(client));
  putU32(batches_, steps);
  putU32(batches_, batchSize);
  batches_.write(reinterpret_cast<const char*>(batch_.data()), static_cast<std::streamsize>(batch_.size() * 4));
  batch_.clear();
  updates_ << fmt::format("{},{},{},{},{:.9g},{},{}\n", round, client, steps, examples, lr, uplinkSeed, payloadBytes);
  if (!batches_ || !updates_) return ioError(dir_ + "/batches.u32");
  return Status::ok();
}

Status RunExport::recordRound(const RoundRow& row, uint32_t accepted, uint64_t payloadUp, uint64_t downlinkSeed,
                              const model::Model& shape, std::span<const float> model) {
  auto opt = [](const std::optional<double>& v) { return v ? fmt::format("{:.6f}", *v) : std::string(); };
  rounds_ << fmt::format("{},{},{},{},{},{},{},{},{},{}\n", row.round, row.committed ? 1 : 0, accepted,
                         opt(row.accuracy), opt(row.testLoss), payloadUp, row.payloadDown, row.bytesUp, row.bytesDown,
                         downlinkSeed);
  rounds_.flush();
  if (!rounds_) return ioError(dir_ + "/rounds.csv");
  if (!row.committed) return Status::ok();
  model::Model m = shape;
  STARLING_RETURN_IF_ERROR(m.setParams(model));
  return m.save(fmt::format("{}/model-{}.model", dir_, row.round));
}

}  // namespace starling::sim
