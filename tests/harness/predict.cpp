#include "predict.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>

#include "sim.hpp"

namespace starling::sim {

namespace {

// Bytes a frame adds to its payload (header, message fields), approximately.
constexpr uint64_t kFrameBytes = 256;

// kReceive and kSend: the coordinator's network threads (TLS) on one message; kDecode
// and kCommit: its strand, one at a time; kEvaluate: its evaluation thread.
enum class JobKind { kClientRound, kOverlapSteps, kReceive, kDecode, kCommit, kEvaluate, kSend };
struct Job {
  double remaining = 0;  // seconds of one core
  JobKind kind = JobKind::kClientRound;
  uint32_t client = 0;
  uint64_t round = 0;
};

enum class EventKind { kAssignArrives, kUpdateArrives, kDeadline, kStored };
struct Event {
  double at = 0;
  uint64_t seq = 0;
  EventKind kind = EventKind::kAssignArrives;
  uint32_t client = 0;
  uint64_t round = 0;
  bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

// What waits for the coordinator's strand: an update to decode and aggregate, or a
// round's deadline.
struct StrandItem {
  EventKind kind = EventKind::kUpdateArrives;
  uint32_t client = 0;
  uint64_t round = 0;
};

enum class Background { kNone, kRunning, kDone };
struct ClientState {
  uint64_t baseRound = 0;     // the server steps its model holds (async catch-up)
  uint64_t lastAssigned = 0;  // async: the round (model version) of its last assignment
  Background background = Background::kNone;
  bool waiting = false;  // overlap: its assignment came before its background steps ended
  uint64_t round = 0;    // the round of its assignment
  double receive = 0;    // CPU of receiving its assignment and catching up (and, the first time, loading its data)
  bool loaded = false;   // its data is loaded (after its first assignment)
};

class Model {
 public:
  Model(const client::DeviceProfile& p, const PredictFleet& f)
      : p_(p), f_(f), clients_(f.clients), assignedAt_(f.clients, 0.0) {
    linkIn_.mbps = linkOut_.mbps = f.coordinatorMbps;
    train_ = p.trainSeconds(static_cast<int>(f.tau), f.batch);
    send_ = p.compressSeconds + p.encodeSeconds + double(p.updateBytes + kFrameBytes) * f.wireCpuSecondsPerByte;
  }

  Prediction run() {
    if (f_.async) {
      slots_ = f_.concurrency == 0 ? f_.clients : std::min(f_.concurrency, f_.clients);
      for (uint32_t i = 0; i < f_.clients; ++i)
        idle_.push_back(i);
      topUp();
    } else {
      startRound();
    }
    while (result_.roundEnds.size() < f_.rounds && (!events_.empty() || !jobs_.empty()))
      step();
    const double n = double(std::max<std::size_t>(1, result_.roundEnds.size()));
    result_.secondsToRounds = result_.roundEnds.empty() ? 0 : result_.roundEnds.back();
    result_.secondsPerRound = result_.secondsToRounds / n;
    const double updates = double(std::max<uint64_t>(1, clientRounds_));
    result_.clientComputeS = computeSum_ / updates;
    result_.clientWallS = wallSum_ / updates;
    result_.transferS = transferSum_ / updates;
    result_.commitS = commitSum_ / n;
    return result_;
  }

 private:
  // The share of a core each job gets now: the federation's jobs are one group that
  // gets an equal share of the cores with each of backgroundLoad other busy groups (at
  // most a core per job), split equally among its jobs.
  double rate() const {
    if (f_.cores <= 0 || jobs_.empty()) return 1.0;
    const double n = double(jobs_.size());
    return std::min(n, f_.cores / (1.0 + f_.backgroundLoad)) / n;
  }

  // Advances to the next job's end or the next event, whichever is first, and handles it.
  void step() {
    const double r = rate();
    double jobAt = std::numeric_limits<double>::infinity();
    for (const Job& j : jobs_)
      jobAt = std::min(jobAt, now_ + j.remaining / r);
    const double eventAt = events_.empty() ? std::numeric_limits<double>::infinity() : events_.top().at;
    const double to = std::min(jobAt, eventAt);
    for (Job& j : jobs_)
      j.remaining -= (to - now_) * r;
    now_ = to;
    if (jobAt <= eventAt) {
      // Every job that ended now, in the order they were started.
      std::vector<Job> ended;
      for (auto it = jobs_.begin(); it != jobs_.end();) {
        if (it->remaining <= 1e-12) {
          ended.push_back(*it);
          it = jobs_.erase(it);
        } else {
          ++it;
        }
      }
      for (const Job& j : ended)
        jobEnded(j);
      return;
    }
    const Event e = events_.top();
    events_.pop();
    eventHappened(e);
  }

  void push(double at, EventKind kind, uint32_t client, uint64_t round) {
    events_.push(Event{at, seq_++, kind, client, round});
  }
  void addJob(double seconds, JobKind kind, uint32_t client, uint64_t round) {
    jobs_.push_back(Job{std::max(seconds, 1e-9), kind, client, round});
  }
  // When a message of `bytes` leaving now arrives, through the coordinator's link `link`.
  double transfer(uint64_t bytes, double mbps, ServerLink& link) {
    const auto startUs = static_cast<int64_t>(std::llround(now_ * 1e6));
    const int64_t atUs = transferMicros(bytes + kFrameBytes, startUs, mbps, f_.latencyMs, &link);
    transferSum_ += double(atUs - startUs) / 1e6;
    return double(atUs) / 1e6;
  }
  uint32_t next() { return static_cast<uint32_t>(cursor_++ % f_.clients); }

  // The assignment of `round` to client i: the broadcasts since the model it holds (none
  // the first time: a client builds the round-0 model from the task's seed), at most a
  // dense model (never less than one broadcast).
  void assign(uint32_t i, uint64_t round) {
    ClientState& c = clients_[i];
    const uint64_t behind = committed_ - std::min(committed_, c.baseRound);
    const uint64_t bytes = std::min(behind * p_.broadcastBytes, std::max(p_.broadcastBytes, 4 * p_.params));
    c.baseRound = committed_;
    c.round = round;
    c.receive = double(bytes + kFrameBytes) * f_.wireCpuSecondsPerByte +
                (p_.broadcastBytes > 0 ? p_.catchUpSeconds * double(bytes) / double(p_.broadcastBytes) : 0.0);
    // A client loads its data after it joins, and the first round starts once all have
    // joined: the load is charged to its first round (all of it, also what a client
    // would have loaded before the round started).
    if (!c.loaded) c.receive += p_.loadSeconds;
    c.loaded = true;
    if (f_.wireCpuSecondsPerByte > 0)
      addJob(double(bytes + kFrameBytes) * f_.wireCpuSecondsPerByte, JobKind::kSend, 0, round);
    assignedAt_[i] = now_;
    push(transfer(bytes, f_.downlinkMbps, linkOut_), EventKind::kAssignArrives, i, round);
  }

  void startRound() {
    ++round_;
    arrived_ = 0;
    closed_ = false;
    const uint32_t k = f_.perRound == 0 ? f_.clients : std::min(f_.perRound, f_.clients);
    quorum_ = k;
    const auto selected =
        std::min<uint32_t>(f_.clients, static_cast<uint32_t>(std::ceil(double(k) * f_.overSelection - 1e-9)));
    for (uint32_t j = 0; j < selected; ++j)
      assign(next(), round_);
    if (f_.deadlineS > 0) push(now_ + f_.deadlineS, EventKind::kDeadline, 0, round_);
  }

  void eventHappened(const Event& e) {
    switch (e.kind) {
      case EventKind::kAssignArrives: {
        ClientState& c = clients_[e.client];
        if (f_.overlap && c.background == Background::kRunning) {
          c.waiting = true;  // sends when its background steps end
        } else if (f_.overlap && c.background == Background::kDone) {
          addJob(c.receive + send_, JobKind::kClientRound, e.client, e.round);
          computeSum_ += c.receive + send_;
        } else {
          addJob(c.receive + train_ + send_, JobKind::kClientRound, e.client, e.round);
          computeSum_ += c.receive + train_ + send_;
        }
        break;
      }
      case EventKind::kUpdateArrives:
        // The network thread reads (decrypts) the frame, then hands it to the strand.
        if (f_.wireCpuSecondsPerByte > 0)
          addJob(double(p_.updateBytes + kFrameBytes) * f_.wireCpuSecondsPerByte, JobKind::kReceive, e.client, e.round);
        else
          toStrand({EventKind::kUpdateArrives, e.client, e.round});
        break;
      case EventKind::kDeadline:
        toStrand({EventKind::kDeadline, 0, e.round});
        break;
      case EventKind::kStored:
        afterStored();
        break;
    }
  }

  void jobEnded(const Job& j) {
    switch (j.kind) {
      case JobKind::kClientRound: {
        ClientState& c = clients_[j.client];
        ++clientRounds_;
        wallSum_ += now_ - assignedAt_[j.client];
        push(transfer(p_.updateBytes, f_.uplinkMbps, linkIn_), EventKind::kUpdateArrives, j.client, j.round);
        c.background = Background::kNone;
        if (f_.overlap) {
          c.background = Background::kRunning;
          addJob(train_, JobKind::kOverlapSteps, j.client, j.round);
        }
        break;
      }
      case JobKind::kOverlapSteps: {
        ClientState& c = clients_[j.client];
        c.background = Background::kDone;
        if (c.waiting) {
          c.waiting = false;
          addJob(c.receive + send_, JobKind::kClientRound, j.client, c.round);
          computeSum_ += c.receive + send_;
        }
        break;
      }
      case JobKind::kReceive:
        toStrand({EventKind::kUpdateArrives, j.client, j.round});
        break;
      case JobKind::kDecode:
        strandBusy_ = false;
        if (f_.async) {
          // The update is in the buffer; its client is free for the next assignment.
          idle_.push_back(j.client);
          if (++buffered_ >= f_.buffer)
            close();  // the server step, on the strand before anything else
          else
            topUp();
        } else if (j.round == round_ && !closed_ && ++arrived_ >= quorum_) {
          close();
        }
        runStrand();
        break;
      case JobKind::kCommit:
        ++committed_;
        if (f_.async) buffered_ -= std::min(buffered_, f_.buffer);
        result_.roundEnds.push_back(now_);
        if (f_.storeSeconds > 0)
          push(now_ + f_.storeSeconds, EventKind::kStored, 0, committed_);  // the strand stays busy
        else
          afterStored();
        break;
      case JobKind::kSend:
        break;
      case JobKind::kEvaluate:
        evaluating_ = false;
        if (blocked_) {
          blocked_ = false;
          startEvaluation();
          afterCommit();
          runStrand();
        }
        break;
    }
  }

  // A committed round is on disk: the strand is free again.
  void afterStored() {
    strandBusy_ = false;
    // The evaluation of the committed model runs beside the next round, as the
    // coordinator's does, one at a time: at a commit the coordinator's strand waits
    // for the previous evaluation before it starts this one, and only then sends the
    // next assignments and takes the next update.
    if (f_.evalExamples > 0 && f_.evalEvery > 0 && committed_ % f_.evalEvery == 0) {
      if (evaluating_) {
        blocked_ = true;
        return;
      }
      startEvaluation();
    }
    afterCommit();
    runStrand();
  }

  // The coordinator's strand handles one thing at a time, in arrival order: decoding
  // and aggregating an update (and, when it completes a round or a server step, the
  // commit), or a round's deadline. While it waits for an evaluation it takes nothing.
  void toStrand(const StrandItem& item) {
    strand_.push_back(item);
    runStrand();
  }
  void runStrand() {
    while (!strandBusy_ && !blocked_ && !strand_.empty()) {
      const StrandItem item = strand_.front();
      strand_.pop_front();
      if (item.kind == EventKind::kDeadline) {
        if (item.round == round_ && !closed_) close();
        continue;
      }
      if (!f_.async && (item.round != round_ || closed_)) continue;  // late: the round is over
      strandBusy_ = true;
      addJob(p_.decodeSeconds, JobKind::kDecode, item.client, item.round);
    }
  }

  // Async: assignments to idle clients while fewer than the concurrency are in flight.
  // A client is not assigned twice from the same model (the open round, committed_ + 1):
  // one whose update came back within the round it was assigned waits for the next
  // server step, as the coordinator's engine does.
  void topUp() {
    const uint64_t open = committed_ + 1;
    for (auto it = idle_.begin(); it != idle_.end() && inFlight() < slots_;) {
      ClientState& c = clients_[*it];
      if (c.lastAssigned == open) {
        ++it;
        continue;
      }
      const uint32_t i = *it;
      it = idle_.erase(it);
      c.lastAssigned = open;
      assign(i, open);
    }
  }
  uint32_t inFlight() const { return f_.clients - static_cast<uint32_t>(idle_.size()); }

  void startEvaluation() {
    evaluating_ = true;
    addJob(double(f_.evalExamples) * p_.evalSecondsPerExample, JobKind::kEvaluate, 0, committed_);
  }
  // What follows a commit: the next sync round, or the next server step of updates
  // already buffered.
  void afterCommit() {
    if (f_.async)
      topUp();
    else if (result_.roundEnds.size() < f_.rounds)
      startRound();
  }

  // The commit's work before the next assignments leave: the broadcast.
  double commitSeconds() const { return p_.broadcastCompressSeconds; }
  // On the strand: the commit of the open round (sync) or server step (async).
  void close() {
    closed_ = true;
    strandBusy_ = true;
    commitSum_ += commitSeconds() + f_.storeSeconds;
    addJob(commitSeconds(), JobKind::kCommit, 0, f_.async ? committed_ + 1 : round_);
  }

  const client::DeviceProfile& p_;
  const PredictFleet& f_;
  std::vector<ClientState> clients_;
  std::vector<double> assignedAt_;
  double train_ = 0, send_ = 0;
  double now_ = 0;
  uint64_t seq_ = 0, cursor_ = 0;
  std::vector<Job> jobs_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  ServerLink linkIn_, linkOut_;  // the coordinator's link, each way
  uint64_t round_ = 0, committed_ = 0;
  uint32_t arrived_ = 0, quorum_ = 0, buffered_ = 0;
  uint32_t slots_ = 0;         // async: clients in flight at most
  std::deque<uint32_t> idle_;  // async: clients without an assignment, in the order they came back
  bool closed_ = false;
  bool evaluating_ = false;  // an evaluation job runs
  bool blocked_ = false;     // the strand waits for it (a commit came meanwhile)
  bool strandBusy_ = false;  // a decode or commit job runs on the strand
  std::deque<StrandItem> strand_;
  uint64_t clientRounds_ = 0;
  double computeSum_ = 0, wallSum_ = 0, transferSum_ = 0, commitSum_ = 0;
  Prediction result_;
};

}  // namespace

Result<Prediction> predict(const client::DeviceProfile& profile, const PredictFleet& f) {
  auto bad = [](const std::string& why) { return Status(StatusCode::kInvalidArgument, why); };
  if (f.clients == 0) return bad("--clients must be at least 1");
  if (f.rounds == 0 || f.rounds > 1'000'000) return bad("--rounds must be in [1, 1000000]");
  if (f.tau == 0) return bad("--tau must be at least 1");
  if (f.batch < 1) return bad("--batch-size must be at least 1");
  if (!(f.overSelection >= 1)) return bad(fmt::format("--over-selection of {} (at least 1)", f.overSelection));
  if (!(f.uplinkMbps > 0) || !(f.downlinkMbps > 0)) return bad("--uplink-mbps and --downlink-mbps must be positive");
  if (!(f.latencyMs >= 0) || !(f.coordinatorMbps >= 0) || !(f.deadlineS >= 0))
    return bad("--latency-ms, --coordinator-mbps and --deadline-s cannot be negative");
  if (!(f.cores >= 0) || !(f.backgroundLoad >= 0)) return bad("--cores and --background-load cannot be negative");
  if (!(f.storeSeconds >= 0)) return bad("--store-ms cannot be negative");
  if (f.async && f.overlap) return bad("--overlap is a sync mode (the asynchronous mode has no rounds to overlap)");
  if (f.async && f.buffer == 0) return bad("--buffer-size must be at least 1");
  if (profile.steps.empty()) return bad("the profile has no step times");
  return Model(profile, f).run();
}

}  // namespace starling::sim
