#include "two_step.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>

#include "starling/compression/error_feedback.hpp"
#include "starling/compression/topk.hpp"
#include "starling/data/touched_features.hpp"
#include "starling/model/model.hpp"

#include "placement.hpp"

namespace starling::sim {

namespace {

using Clock = std::chrono::steady_clock;

Status invalid(const std::string& message) {
  return Status(StatusCode::kInvalidArgument, message);
}

// What training on one assignment of examples to workers measured.
struct Training {
  std::vector<std::vector<uint32_t>> examples;    // per worker
  std::vector<std::vector<uint32_t>> rows;        // per worker: the rows it touches
  std::vector<std::vector<uint32_t>> pullCounts;  // per worker, parallel to rows
  std::vector<std::vector<uint32_t>> pushCounts;
  std::vector<uint64_t> nonZeros;  // per worker: of its examples, explicit zeros aside
  double lossBefore = 0, lossAfter = 0;
  double computeSeconds = 0;
};

Status checkOptions(const data::Dataset& dataset, const TwoStepOptions& o) {
  if (o.workers == 0) return invalid("the number of workers must be at least 1");
  if (o.servers == 0) return invalid("the number of servers must be at least 1");
  if (o.workers > dataset.size())
    return invalid(fmt::format("more workers ({}) than examples ({})", o.workers, dataset.size()));
  if (!dataset.isSparse())
    return invalid(
        fmt::format("the data set is dense ({} features stored per example): the problem is about "
                    "sparse data (LIBSVM or the power-law generator)",
                    dataset.featureDim()));
  if (dataset.isRegression() || dataset.numClasses() > 2)
    return invalid(fmt::format(
        "the model is a logistic regression: the data set needs labels 0/1, not {}",
        dataset.isRegression() ? std::string("real targets") : fmt::format("{} classes", dataset.numClasses())));
  if (!(o.density >= 0 && o.density <= 1)) return invalid(fmt::format("the density {} is not in [0, 1]", o.density));
  if (o.iterations == 0) return invalid("the number of iterations must be at least 1");
  if (!(o.tolerance >= 0)) return invalid("the tolerance must be >= 0");
  const TimeModel& t = o.time;
  if (!(t.bandwidth > 0) || !(t.latencySeconds >= 0) || !(t.messageSeconds >= 0) || !(t.computeSecondsPerNonZero >= 0))
    return invalid("the time model needs a bandwidth > 0 and latency, message and compute times >= 0");
  return Status::ok();
}

// Each example as a "client" of placement.hpp: its non-zero features.
std::vector<coordinator::ClientRows> examplesAsClients(const data::Dataset& dataset) {
  std::vector<coordinator::ClientRows> out(dataset.size());
  data::SparseBatch batch;
  std::vector<uint32_t> idx(1);
  for (uint32_t i = 0; i < dataset.size(); ++i) {
    idx[0] = i;
    dataset.gatherSparse(idx, batch);
    out[i].id = std::to_string(i);
    for (std::size_t k = 0; k < batch.nnz(); ++k)
      if (batch.values[k] != 0) out[i].rows.push_back(batch.indices[k]);
  }
  return out;
}

// Trains for the iterations on this assignment and counts each worker's pushes.
Result<Training> train(const data::Dataset& dataset, std::span<const uint32_t> workerOf, const TwoStepOptions& o) {
  Training t;
  const uint32_t workers = o.workers;
  t.examples.resize(workers);
  for (uint32_t i = 0; i < workerOf.size(); ++i)
    t.examples[workerOf[i]].push_back(i);
  auto model = model::Model::fromSpec(fmt::format("linear:{}-1/logistic", dataset.featureDim()));
  if (!model) return model.status();
  const std::size_t weightOffset = model->layout().find("dense0.weight")->offset;
  const model::ParamRange dense = model->denseParams();
  auto before = model->evaluate(dataset);
  if (!before) return before.status();
  t.lossBefore = before->loss;

  std::vector<data::SparseBatch> batches(workers);
  std::vector<std::vector<float>> labels(workers);
  std::vector<compression::ErrorFeedback> memory;
  t.rows.resize(workers);
  t.pullCounts.resize(workers);
  t.pushCounts.resize(workers);
  t.nonZeros.assign(workers, 0);
  const bool compress = o.density > 0 && o.density < 1;
  for (uint32_t w = 0; w < workers; ++w) {
    t.rows[w] = data::featuresTouched(dataset, t.examples[w]);
    t.pullCounts[w].assign(t.rows[w].size(), 0);
    t.pushCounts[w].assign(t.rows[w].size(), 0);
    dataset.gatherSparse(t.examples[w], batches[w]);
    t.nonZeros[w] =
        uint64_t(std::count_if(batches[w].values.begin(), batches[w].values.end(), [](float v) { return v != 0; }));
    for (uint32_t i : t.examples[w])
      labels[w].push_back(model::labelValue(dataset, i));
    if (compress) {
      auto m = compression::ErrorFeedback::create(std::max<std::size_t>(1, t.rows[w].size()));
      if (!m) return m.status();
      memory.push_back(std::move(*m));
    }
  }
  compression::TopKCompressor topk;
  compression::Compressed sent;
  std::vector<float> grad(model->numParams(), 0.0f), update(model->numParams(), 0.0f), local;
  std::vector<model::ParamRange> touched;
  std::vector<uint8_t> pushed(dataset.featureDim(), 0);  // per row: some worker pushed it this iteration
  const double n = double(dataset.size());
  for (uint32_t it = 0; it < o.iterations; ++it) {
    std::fill(update.begin(), update.end(), 0.0f);
    std::fill(pushed.begin(), pushed.end(), 0);
    for (uint32_t w = 0; w < workers; ++w) {
      if (t.examples[w].empty()) continue;
      const auto start = Clock::now();
      model->forwardBackwardSparse(batches[w], labels[w].data(), nullptr, grad, &touched);
      t.computeSeconds += std::chrono::duration<double>(Clock::now() - start).count();
      const auto& rows = t.rows[w];
      local.resize(rows.size());
      for (std::size_t k = 0; k < rows.size(); ++k)
        local[k] = grad[weightOffset + rows[k]];
      const float share = float(double(t.examples[w].size()) / n);
      for (std::size_t p = dense.offset; p < dense.offset + dense.count; ++p)
        update[p] += share * grad[p];
      for (const auto& range : touched)  // grad stays zero outside the ranges written
        std::fill_n(grad.begin() + std::ptrdiff_t(range.offset), range.count, 0.0f);
      if (rows.empty()) continue;
      if (!compress) {
        for (std::size_t k = 0; k < rows.size(); ++k) {
          update[weightOffset + rows[k]] += share * local[k];
          pushed[rows[k]] = 1;
          ++t.pushCounts[w][k];
        }
        continue;
      }
      compression::CompressParams params;
      params.density = o.density;
      params.seed = it;
      STARLING_RETURN_IF_ERROR(memory[w].compress(local, topk, params, sent, it));
      STARLING_RETURN_IF_ERROR(memory[w].commit(it));
      for (std::size_t j = 0; j < sent.indices.size(); ++j) {
        const uint32_t k = sent.indices[j];
        update[weightOffset + rows[k]] += share * sent.values[j];
        pushed[rows[k]] = 1;
        ++t.pushCounts[w][k];
      }
    }
    auto params = model->params();
    for (std::size_t p = 0; p < params.size(); ++p)
      params[p] -= o.learningRate * update[p];
    // The pull that ends the iteration: each worker's rows that some push changed.
    for (uint32_t w = 0; w < workers; ++w)
      for (std::size_t k = 0; k < t.rows[w].size(); ++k)
        if (pushed[t.rows[w][k]]) ++t.pullCounts[w][k];
  }
  auto after = model->evaluate(dataset);
  if (!after) return after.status();
  t.lossAfter = after->loss;
  return t;
}

double maxOverMean(std::span<const double> values) {
  double sum = 0, max = 0;
  for (double v : values) {
    sum += v;
    max = std::max(max, v);
  }
  return sum > 0 ? max / (sum / double(values.size())) : 1.0;
}

// The traffic, loads and modelled time of one combination; fills row's metrics.
void measure(const Training& t, const coordinator::ShardPlacement& shards, const TwoStepOptions& o, TwoStepRow& row) {
  const TimeModel& m = o.time;
  const uint32_t workers = o.workers, servers = o.servers;
  const double iterations = o.iterations;
  std::vector<double> workerBytes(workers, 0), serverBytes(servers, 0);
  std::vector<uint64_t> workerMessages(workers, 0), serverMessages(servers, 0);
  std::vector<double> workerRows(workers, 0), workerExamples(workers, 0), workerNonZeros(workers, 0);
  std::vector<uint32_t> rowsOnServer(servers);
  std::vector<uint64_t> movedOnServer(servers);  // pulls and pushes over the iterations
  row.pullRows = row.pushRows = 0;
  row.pairs = 0;
  for (uint32_t w = 0; w < workers; ++w) {
    std::fill(rowsOnServer.begin(), rowsOnServer.end(), 0);
    std::fill(movedOnServer.begin(), movedOnServer.end(), 0);
    const auto& rows = t.rows[w];
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const auto at = std::lower_bound(shards.rows.begin(), shards.rows.end(), rows[k]) - shards.rows.begin();
      const uint32_t s = shards.shardOf[std::size_t(at)];
      ++rowsOnServer[s];
      movedOnServer[s] += uint64_t(t.pullCounts[w][k]) + t.pushCounts[w][k];
      row.pullRows += t.pullCounts[w][k] / iterations;
      row.pushRows += t.pushCounts[w][k] / iterations;
    }
    for (uint32_t s = 0; s < servers; ++s) {
      if (rowsOnServer[s] == 0) continue;
      const double bytes = double(movedOnServer[s]) / iterations * m.bytesPerRow + 2.0 * m.headerBytes;
      workerBytes[w] += bytes;
      serverBytes[s] += bytes;
      workerMessages[w] += 2;
      serverMessages[s] += 2;
      ++row.pairs;
    }
    workerRows[w] = double(rows.size());
    workerExamples[w] = double(t.examples[w].size());
    workerNonZeros[w] = double(t.nonZeros[w]);
  }
  row.trafficBytes = 0;
  for (double b : workerBytes)
    row.trafficBytes += b;
  row.workerRowsMaxOverMean = maxOverMean(workerRows);
  row.examplesMaxOverMean = maxOverMean(workerExamples);
  row.nonZerosMaxOverMean = maxOverMean(workerNonZeros);
  row.serverLoadMaxOverMean = maxOverMean(serverBytes);
  double slowest = 0;
  for (uint32_t w = 0; w < workers; ++w)
    slowest = std::max(slowest, m.computeSecondsPerNonZero * double(t.nonZeros[w]) + workerBytes[w] / m.bandwidth +
                                    double(workerMessages[w]) * m.messageSeconds + 2 * m.latencySeconds);
  for (uint32_t s = 0; s < servers; ++s)
    slowest = std::max(slowest, serverBytes[s] / m.bandwidth + double(serverMessages[s]) * m.messageSeconds);
  row.iterationSeconds = slowest;
}

const TwoStepRow* find(const TwoStepReport& report, const char* step1, const char* step2) {
  for (const auto& row : report.rows)
    if (row.step1 == step1 && row.step2 == step2) return &row;
  return nullptr;
}

}  // namespace

Result<TwoStepReport> runTwoStep(const data::Dataset& dataset, std::string description, const TwoStepOptions& options) {
  STARLING_RETURN_IF_ERROR(checkOptions(dataset, options));
  TwoStepReport report;
  report.data = std::move(description);
  report.examples = dataset.size();
  report.features = dataset.featureDim();
  report.options = options;
  const auto examples = examplesAsClients(dataset);
  for (const auto& e : examples)
    report.nonZeros += e.rows.size();
  std::vector<uint32_t> weights;  // step 1's: empty balances examples
  if (options.balance == Balance::kNonZeros)
    for (const auto& e : examples)
      weights.push_back(static_cast<uint32_t>(e.rows.size()));
  double computeSeconds = 0, computeNonZeros = 0;
  for (auto step1 : {coordinator::RelayMethod::kRandom, coordinator::RelayMethod::kMetis}) {
    coordinator::RelayPlacementOptions placeOptions;
    placeOptions.relays = options.workers;
    placeOptions.method = step1;
    placeOptions.tolerance = options.tolerance;
    placeOptions.seed = options.seed;
    placeOptions.graph = options.graph;
    auto placed = coordinator::placeWeightedClients(examples, weights, dataset.featureDim(), placeOptions);
    if (!placed) return Status(placed.status().code(), "step 1: " + placed.status().message());
    auto trained = train(dataset, placed->relayOf, options);
    if (!trained) return trained.status();
    const Training& t = *trained;
    report.loss.emplace_back(t.lossBefore, t.lossAfter);
    computeSeconds += t.computeSeconds;
    for (uint64_t z : t.nonZeros)
      computeNonZeros += double(z) * options.iterations;

    // Step 2's input: the workers and, per (worker, row), the rows moved over the
    // iterations: a pull each, and the pushes counted.
    std::vector<coordinator::ClientRows> workers(options.workers);
    std::vector<std::vector<uint32_t>> weights(options.workers);
    std::size_t touchedRows = 0;
    {
      std::vector<uint32_t> all;
      for (uint32_t w = 0; w < options.workers; ++w) {
        workers[w].id = std::to_string(w);
        workers[w].rows = t.rows[w];
        all.insert(all.end(), t.rows[w].begin(), t.rows[w].end());
        for (std::size_t k = 0; k < t.rows[w].size(); ++k)
          weights[w].push_back(t.pullCounts[w][k] + t.pushCounts[w][k]);
      }
      std::sort(all.begin(), all.end());
      touchedRows = std::size_t(std::unique(all.begin(), all.end()) - all.begin());
    }
    if (options.servers > touchedRows)
      return invalid(fmt::format("more servers ({}) than rows the examples touch ({})", options.servers, touchedRows));
    report.rowsTouched = touchedRows;
    for (auto step2 :
         {coordinator::ShardMethod::kHash, coordinator::ShardMethod::kLpt, coordinator::ShardMethod::kMetis}) {
      coordinator::ShardPlacementOptions shardOptions;
      shardOptions.shards = options.servers;
      shardOptions.method = step2;
      shardOptions.tolerance = options.tolerance;
      shardOptions.seed = options.seed;
      auto shards = coordinator::placeWeightedRows(workers, weights, dataset.featureDim(), shardOptions);
      if (!shards) return Status(shards.status().code(), "step 2: " + shards.status().message());
      TwoStepRow row;
      row.step1 = coordinator::relayMethodName(step1);
      row.step2 = coordinator::shardMethodName(step2);
      row.step1Seconds = placed->seconds;
      row.step2Seconds = shards->seconds;
      measure(t, *shards, options, row);
      row.workerOf = placed->relayOf;
      row.rows = shards->rows;
      row.serverOf = shards->shardOf;
      row.workerRows = t.rows;
      row.pullCounts = t.pullCounts;
      row.pushCounts = t.pushCounts;
      report.rows.push_back(std::move(row));
    }
  }
  report.measuredComputeSecondsPerNonZero = computeNonZeros > 0 ? computeSeconds / computeNonZeros : 0;
  return report;
}

std::string twoStepTable(const TwoStepReport& r) {
  const TwoStepOptions& o = r.options;
  std::string out = fmt::format(
      "{}: {} examples, {} features, {} non-zeros; {} workers balancing {}, {} servers; push {}; {} iterations "
      "of logistic regression\n",
      r.data, r.examples, r.features, r.nonZeros, o.workers, o.balance == Balance::kNonZeros ? "non-zeros" : "examples",
      o.servers,
      o.density > 0 && o.density < 1 ? fmt::format("top-k at density {}", o.density) : std::string("every row touched"),
      o.iterations);
  if (const TwoStepRow* random = find(r, "random", "hash"); random && r.rowsTouched > 0)
    out += fmt::format(
        "{} rows touched: without compression no placement pulls fewer per iteration (random pulls {:.2f}x that)\n",
        r.rowsTouched, random->pullRows / double(r.rowsTouched));
  for (std::size_t i = 0; i < r.loss.size(); ++i)
    out += fmt::format("training on {}'s workers: loss {:.4f} -> {:.4f}\n", i == 0 ? "random" : "metis",
                       r.loss[i].first, r.loss[i].second);
  out += fmt::format(
      "time model: {:.3g} GB/s per node, latency {:.0f} us, {:.1f} us per message, {:.2f} ns per non-zero "
      "(this machine measured {:.2f})\n",
      o.time.bandwidth / 1e9, o.time.latencySeconds * 1e6, o.time.messageSeconds * 1e6,
      o.time.computeSecondsPerNonZero * 1e9, r.measuredComputeSecondsPerNonZero * 1e9);
  out += fmt::format("{:<7} {:<6} {:>11} {:>11} {:>13} {:>8} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9}\n", "step1",
                     "step2", "pull_rows", "push_rows", "traffic_MB", "pairs", "rows_max", "load_max", "examples",
                     "nnz_max", "iter_ms", "step1_s", "step2_s");
  for (const auto& row : r.rows)
    out += fmt::format(
        "{:<7} {:<6} {:>11.0f} {:>11.0f} {:>13.4f} {:>8} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>11.4f} {:>9.3f} "
        "{:>9.3f}\n",
        row.step1, row.step2, row.pullRows, row.pushRows, row.trafficBytes / 1e6, row.pairs, row.workerRowsMaxOverMean,
        row.serverLoadMaxOverMean, row.examplesMaxOverMean, row.nonZerosMaxOverMean, row.iterationSeconds * 1e3,
        row.step1Seconds, row.step2Seconds);
  out +=
      "(rows_max, load_max, examples, nnz_max: the largest worker's rows, server's bytes, worker's examples and "
      "non-zeros, over the mean)\n";
  const TwoStepRow* base = find(r, "random", "hash");
  const TwoStepRow* best = find(r, "metis", "metis");
  if (base && best) {
    const double partition = best->step1Seconds + best->step2Seconds;
    const double saved = base->iterationSeconds - best->iterationSeconds;
    const std::string payback = saved > 0 ? fmt::format("{:.1f}", partition / saved) : std::string("never");
    out += fmt::format(
        "metis/metis against random/hash: {:.2f}x less traffic, {:.2f}x faster iterations; the {:.3f} s of "
        "partitioning {}\n",
        base->trafficBytes / best->trafficBytes, base->iterationSeconds / best->iterationSeconds, partition,
        saved > 0 ? "pay back in " + payback + " iterations" : std::string("never pay back (no iteration is faster)"));
    out += fmt::format(
        "summary: twostep_traffic_ratio={:.3f} twostep_time_ratio={:.3f} twostep_server_imbalance={:.3f} "
        "twostep_partition_s={:.3f} twostep_payback_iterations={}\n",
        base->trafficBytes / best->trafficBytes, base->iterationSeconds / best->iterationSeconds,
        best->serverLoadMaxOverMean, partition, payback);
  }
  return out;
}

std::string twoStepDump(const TwoStepReport& report) {
  std::ostringstream out;
  for (const auto& row : report.rows) {
    out << "combination " << row.step1 << " " << row.step2 << "\n";
    for (std::size_t i = 0; i < row.workerOf.size(); ++i)
      out << "worker " << i << " " << row.workerOf[i] << "\n";
    for (std::size_t k = 0; k < row.rows.size(); ++k)
      out << "row " << row.rows[k] << " " << row.serverOf[k] << "\n";
    for (std::size_t w = 0; w < row.workerRows.size(); ++w) {
      out << "moves " << w;
      for (std::size_t k = 0; k < row.workerRows[w].size(); ++k)
        if (row.pullCounts[w][k] + row.pushCounts[w][k] > 0)
          out << " " << row.workerRows[w][k] << ":" << row.pullCounts[w][k] << ":" << row.pushCounts[w][k];
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace starling::sim
