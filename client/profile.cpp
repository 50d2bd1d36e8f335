#include "starling/client/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <numeric>
#include <optional>

#include "starling/client/learner.hpp"
#include "starling/client/trainer.hpp"
#include "starling/compression/error_feedback.hpp"
#include "starling/compression/payload.hpp"
#include "starling/model/model.hpp"
#include "starling/util/checksum.hpp"

namespace starling::client {

namespace {

// CPU seconds this process has used: what a figure costs the device whatever else shares
// its cores (wall time would count the time others held them).
double cpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The median CPU time of `repeats` calls of f (each returning a Status).
template <class F>
Result<double> timed(int repeats, F f) {
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = cpuSeconds();
    STARLING_RETURN_IF_ERROR(f(r));
    seconds.push_back(cpuSeconds() - t0);
  }
  return median(std::move(seconds));
}

// The Welcome a coordinator would send for `task`: LearnerTask::create() then makes the
// device's model, trainer options and uplink compressor exactly as for a real round.
wire::WelcomeMsg welcomeFor(const ProfileTask& task, const std::string& spec) {
  wire::WelcomeMsg w;
  w.modelSpec = spec;
  wire::HyperParameters h;
  h.lr = task.lr;
  h.momentum = task.momentum;
  h.batchSize = 32;
  h.tau = 1;
  h.seed = 1;
  w.hyper = h;
  wire::CompressionSettings c;
  c.uplink = task.uplink;
  c.uplinkDensity = static_cast<float>(task.uplinkDensity);
  c.downlink = task.downlink;
  c.downlinkDensity = static_cast<float>(task.downlinkDensity);
  c.errorFeedback = task.errorFeedback;
  c.fp16Values = task.fp16Values;
  c.uplinkTernary = task.uplinkTernary;
  w.compression = c;
  w.initSeed = 1;
  return w;
}

}  // namespace

double DeviceProfile::trainSeconds(int tau, int batch) const {
  if (steps.empty() || tau <= 0) return runOverheadSeconds;
  double step = steps.front().stepSeconds;
  if (steps.size() >= 2) {
    // The segment whose batch sizes surround `batch`, or the nearest one at either end.
    std::size_t hi = 1;
    while (hi + 1 < steps.size() && steps[hi].batch < batch)
      ++hi;
    const StepTime& a = steps[hi - 1];
    const StepTime& b = steps[hi];
    const double t = double(batch - a.batch) / double(b.batch - a.batch);
    step = std::max(0.0, a.stepSeconds + t * (b.stepSeconds - a.stepSeconds));
  }
  return runOverheadSeconds + double(tau) * step;
}

Result<DeviceProfile> measureProfile(const ProfileTask& task, const data::Dataset& data, const ProfileOptions& o) {
  if (data.size() == 0) return Status(StatusCode::kInvalidArgument, "no examples to profile on");
  if (o.repeats < 1 || o.steps < 1 || o.batchSizes.empty())
    return Status(StatusCode::kInvalidArgument, "a profile needs at least one repeat, one step and one batch size");
  auto spec = model::resolveSpec(task.model, task.kind, data.featureDim(), data.numClasses());
  if (!spec) return spec.status().withContext("--model");
  auto learnerTask = LearnerTask::create(welcomeFor(task, *spec));
  if (!learnerTask) return learnerTask.status();
  LearnerTask& lt = **learnerTask;

  DeviceProfile p;
  p.task = task;
  p.task.model = *spec;
  p.params = lt.numParams();
  p.repeats = o.repeats;
  const std::size_t d = lt.numParams();
  model::Model initial = lt.prototype();
  initial.initialize(lt.initSeed());
  const std::vector<float> base(initial.params().begin(), initial.params().end());
  std::vector<float> delta(d);

  // Steps per batch size: the median of repeated runs of o.steps steps, less a run's
  // overhead (the loss probe), measured as the median of runs of no steps.
  std::vector<int> batches = o.batchSizes;
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  auto trainer = Trainer::create(lt.prototype(), data, lt.trainerOptions());
  if (!trainer) return trainer.status();
  auto run = [&](int steps, int batch, int r) -> Status {
    auto stats = trainer->run(base, TrainRequest{steps, task.lr, uint64_t(r + 1), batch}, delta);
    return stats ? Status::ok() : stats.status();
  };
  STARLING_RETURN_IF_ERROR(run(o.steps, batches.front(), 0));  // warm the caches and workspaces
  auto overhead = timed(o.repeats, [&](int r) { return run(0, batches.front(), r); });
  if (!overhead) return overhead.status();
  p.runOverheadSeconds = *overhead;
  // A step's time is the median over repeats of (a run of n steps less the run of no
  // steps beside it). Paired runs share the machine's state, so the overhead cancels; if
  // the steps still cost less than the noise (a tiny model), n doubles, up to 64 times
  // the requested steps, and past that the whole run per step stands as an upper bound.
  for (int b : batches) {
    if (b < 1) return Status(StatusCode::kInvalidArgument, fmt::format("batch size {}", b));
    STARLING_RETURN_IF_ERROR(run(1, b, 0));
    double stepSeconds = 0;
    for (int n = o.steps; stepSeconds <= 0; n *= 2) {
      std::vector<double> whole, less;
      for (int r = 0; r < o.repeats; ++r) {
        const double t0 = cpuSeconds();
        STARLING_RETURN_IF_ERROR(run(0, b, r));
        const double t1 = cpuSeconds();
        STARLING_RETURN_IF_ERROR(run(n, b, r));
        const double t2 = cpuSeconds();
        whole.push_back(t2 - t1);
        less.push_back((t2 - t1) - (t1 - t0));
      }
      stepSeconds = median(std::move(less)) / n;
      if (stepSeconds <= 0 && n >= 64 * o.steps) stepSeconds = std::max(median(std::move(whole)) / n, 1e-9);
    }
    p.steps.push_back(StepTime{b, stepSeconds});
  }

  // The uplink: the last run's difference through the task's compressor, with error
  // feedback when the task uses it (each compression committed, as an accepted round).
  std::optional<compression::ErrorFeedback> memory;
  if (lt.errorFeedback()) {
    auto m = compression::ErrorFeedback::create(d);
    if (!m) return m.status();
    memory.emplace(std::move(*m));
  }
  compression::Compressed q;
  auto compressed = timed(o.repeats, [&](int r) -> Status {
    const compression::CompressParams params{task.uplinkDensity, uint64_t(r + 1)};
    if (!memory) return lt.uplink().compress(delta, params, q);
    STARLING_RETURN_IF_ERROR(memory->compress(delta, lt.uplink(), params, q, uint64_t(r)));
    return memory->commit(uint64_t(r));
  });
  if (!compressed) return compressed.status().withContext("the uplink compressor");
  p.compressSeconds = *compressed;
  compression::Payload payload;
  auto encoded = timed(o.repeats, [&](int) { return compression::encode(q, payload); });
  if (!encoded) return encoded.status();
  p.encodeSeconds = *encoded;
  p.updateBytes = payload.byteSize();
  compression::Compressed back;
  auto decoded = timed(o.repeats, [&](int) { return compression::decode(payload, static_cast<uint32_t>(d), back); });
  if (!decoded) return decoded.status();
  p.decodeSeconds = *decoded;

  // The downlink: the coordinator's compressor on a difference of the same size (the
  // aggregate is one), encoded as a broadcast is.
  auto down = compression::makeCompressor(
      task.downlink, compression::linkOptions(task.fp16Values, task.downlinkTernary, task.errorFeedback, 15));
  if (!down) return down.status().withContext("the downlink compressor");
  compression::Compressed bq;
  compression::Payload broadcast;
  auto made = timed(o.repeats, [&](int r) -> Status {
    STARLING_RETURN_IF_ERROR((*down)->compress(delta, {task.downlinkDensity, uint64_t(r + 1)}, bq));
    return compression::encode(bq, broadcast);
  });
  if (!made) return made.status().withContext("the downlink compressor");
  p.broadcastCompressSeconds = *made;
  p.broadcastBytes = broadcast.byteSize();
  std::vector<float> model = base;
  compression::Compressed applied;
  auto caught = timed(o.repeats, [&](int) -> Status {
    STARLING_RETURN_IF_ERROR(compression::decode(broadcast, static_cast<uint32_t>(d), applied));
    STARLING_RETURN_IF_ERROR(compression::addScaled(applied, -1.0f, model));
    (void)checksum64(model);  // as catchUp() checks the model it reached
    return Status::ok();
  });
  if (!caught) return caught.status().withContext("applying a broadcast");
  p.catchUpSeconds = *caught;

  // Evaluation, per example, on at most o.evalExamples of the examples.
  std::vector<uint32_t> rows(std::min<std::size_t>(data.size(), std::size_t(std::max(1, o.evalExamples))));
  std::iota(rows.begin(), rows.end(), 0u);
  const data::Dataset sample = data.subset(rows);
  auto evaluated = timed(o.repeats, [&](int) -> Status {
    auto e = initial.evaluate(sample);
    return e ? Status::ok() : e.status();
  });
  if (!evaluated) return evaluated.status().withContext("evaluating");
  p.evalSecondsPerExample = *evaluated / double(sample.size());
  return p;
}

}  // namespace starling::client
