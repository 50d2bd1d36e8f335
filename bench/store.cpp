// bench/store: what the coordinator's per-round commit costs on this disk
//
// The coordinator records every committed round in SQLite before the round's verdicts
// and the next assignments leave (coordinator::Store::commitRound: the round, its
// participants and the checkpoint, in one transaction, durable when it returns: WAL
// with synchronous=FULL). `starling-sim predict --store-ms` takes this figure as the
// commit's wall time on the coordinator's strand (bench/predict.sh measures it at the
// start of its run, in the directory bench-federation's databases go to).
//
// Baseline in the same run: the checkpoint's bytes written to a plain file and
// fdatasync'ed (the floor of a durable write of those bytes).
//
//   bench-store [--params N] [--server-memory] [--participants K] [--rounds R] [--dir DIR]
//
// Defaults: 199,210 parameters (MLP 784-200-200-10), no server memory, 10 participants,
// 20 rounds, in $TMPDIR (or /tmp). Last line: summary: store_commit_ms=... (median)
// file_fsync_ms=... (median)

#include "starling/coordinator/store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace {

using namespace starling;
using namespace starling::coordinator;
using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench-store: %s\n", what.c_str());
  std::exit(2);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t params = 199'210, participants = 10;
  uint64_t rounds = 20;
  bool serverMemory = false;
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--params")
      params = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--participants")
      participants = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--rounds")
      rounds = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--server-memory")
      serverMemory = true;
    else if (a == "--dir")
      dir = value();
    else
      die("unknown option " + a +
          " (usage: bench-store [--params N] [--server-memory] [--participants K] [--rounds R] [--dir DIR])");
  }
  if (params == 0 || rounds == 0) die("--params and --rounds must be at least 1");

  std::string work = (std::filesystem::path(dir) / "starling-bench-store-XXXXXX").string();
  if (mkdtemp(work.data()) == nullptr) die("cannot make a directory in " + dir + ": " + std::strerror(errno));
  auto store = Store::open(work + "/bench.db");
  if (!store) die(store.status().toString());

  std::vector<double> commitMs, fileMs;
  std::size_t checkpointBytes = 0;
  for (uint64_t r = 1; r <= rounds; ++r) {
    RoundRecord rec;
    rec.round = r;
    rec.status = RoundStatus::kCommitted;
    rec.reason = "quorum";
    rec.tau = 100;
    rec.lr = 0.05;
    rec.density = rec.densityDown = 1.0;
    rec.selected = rec.returned = rec.accepted = static_cast<int64_t>(participants);
    rec.startedMs = 1'700'000'000'000 + static_cast<int64_t>(r) * 1000;
    rec.endedMs = rec.startedMs + 500;
    std::vector<ParticipantRecord> parts(participants);
    std::vector<ClientRecord> clients(participants);
    for (std::size_t k = 0; k < participants; ++k) {
      parts[k].round = r;
      parts[k].clientId = "client-" + std::to_string(k);
      parts[k].outcome = ParticipantOutcome::kAccepted;
      parts[k].assignedMs = rec.startedMs;
      parts[k].returnedMs = rec.endedMs;
      parts[k].steps = 100;
      parts[k].examples = 3200;
      clients[k].id = parts[k].clientId;
    }
    Checkpoint cp;
    cp.round = r;
    cp.model.resize(params);
    for (std::size_t i = 0; i < params; ++i)
      cp.model[i] = static_cast<float>((r * 2'654'435'761u + i * 40'503u) % 65'536) / 65'536.0f;
    if (serverMemory) cp.serverMemory.assign(cp.model.rbegin(), cp.model.rend());
    checkpointBytes = (cp.model.size() + cp.serverMemory.size()) * sizeof(float);

    auto t0 = Clock::now();
    if (Status s = (*store)->commitRound(rec, parts, cp, clients); !s) die(s.toString());
    commitMs.push_back(msSince(t0));

    // The baseline: the same bytes, durable in a plain file.
    t0 = Clock::now();
    const std::string path = work + "/plain.bin";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) die("cannot write " + path + ": " + std::strerror(errno));
    bool ok = ::write(fd, cp.model.data(), cp.model.size() * sizeof(float)) ==
              static_cast<ssize_t>(cp.model.size() * sizeof(float));
    if (serverMemory)
      ok = ok && ::write(fd, cp.serverMemory.data(), cp.serverMemory.size() * sizeof(float)) ==
                     static_cast<ssize_t>(cp.serverMemory.size() * sizeof(float));
    ok = ok && ::fdatasync(fd) == 0;
    ::close(fd);
    if (!ok) die("cannot write " + path + ": " + std::strerror(errno));
    fileMs.push_back(msSince(t0));
  }
  store->reset();
  std::error_code ec;
  std::filesystem::remove_all(work, ec);

  std::printf("%-28s %10s %10s %10s\n", "per round (ms)", "median", "min", "max");
  std::printf("%-28s %10.2f %10.2f %10.2f\n", "Store::commitRound", median(commitMs),
              *std::min_element(commitMs.begin(), commitMs.end()), *std::max_element(commitMs.begin(), commitMs.end()));
  std::printf("%-28s %10.2f %10.2f %10.2f\n", "write + fdatasync (same bytes)", median(fileMs),
              *std::min_element(fileMs.begin(), fileMs.end()), *std::max_element(fileMs.begin(), fileMs.end()));
  std::printf("%zu parameters%s, %zu checkpoint bytes, %zu participants, %llu rounds, in %s\n", params,
              serverMemory ? " + server memory" : "", checkpointBytes, participants,
              static_cast<unsigned long long>(rounds), dir.c_str());
  std::printf("summary: store_commit_ms=%.2f file_fsync_ms=%.2f\n", median(commitMs), median(fileMs));
  return 0;
}
