// Durability: a crash never loses a committed round nor leaves half of one; a full
// disk, a read-only file or a locked database is a clear error that changes nothing.
//
// Crashes are real: a forked child commits rounds and is killed (SIGKILL or _exit)
// inside a transaction or at a random moment; the parent reopens the file.

#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "starling/coordinator/store.hpp"

#include "store_fixtures.hpp"

using namespace starling;
using namespace starling::coordinator;
using namespace starling::coordinator::testing;

namespace {

void requireOk(const Status& status) {
  INFO(status.toString());
  REQUIRE(status.isOk());
}

// What a forked child did: its exit code or the signal that ended it, and the
// lines it wrote to its pipe.
struct ChildOutcome {
  bool exited = false;
  int exitCode = -1;
  int signal = 0;
  std::string output;
};

// Runs body in a forked child. body gets the write end of a pipe (for progress lines)
// and returns the child's exit code; the child never returns into Catch2. When
// watch is given, the parent calls it with each line as it arrives (and may kill
// the child); otherwise it just collects the output.
ChildOutcome runChild(const std::function<int(int fd)>& body,
                      const std::function<void(pid_t, const std::string&)>& watch = {}) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    int code = 100;
    try {
      code = body(fds[1]);
    } catch (...) {
      code = 101;
    }
    _exit(code);
  }
  close(fds[1]);
  ChildOutcome outcome;
  FILE* in = fdopen(fds[0], "r");
  REQUIRE(in != nullptr);
  char line[4096];
  while (std::fgets(line, sizeof line, in) != nullptr) {
    outcome.output += line;
    if (watch) watch(pid, line);
  }
  std::fclose(in);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  if (WIFEXITED(status)) {
    outcome.exited = true;
    outcome.exitCode = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    outcome.signal = WTERMSIG(status);
  }
  return outcome;
}

void writeLine(int fd, const std::string& text) {
  const std::string line = text + "\n";
  const ssize_t n = write(fd, line.data(), line.size());
  (void)n;
}

Status commitRoundOf(Store& store, uint64_t r, std::size_t modelSize) {
  const std::vector<ParticipantRecord> participants = {
      makeParticipant(r, 1, ParticipantOutcome::kAccepted),
      makeParticipant(r, 2, ParticipantOutcome::kStraggler, "deadline passed"),
  };
  const std::vector<ClientRecord> clients = {makeClient(1), makeClient(2)};
  return store.commitRound(makeRound(r), participants, makeCheckpoint(r, modelSize), clients);
}

// The invariant after any crash: rounds 1..last are all there, each with its
// participants, the latest checkpoint is round last's, bit for bit, and SQLite
// finds the file sound.
void requireIntactThrough(const std::string& path, uint64_t last, std::size_t modelSize) {
  Result<std::unique_ptr<Store>> store = Store::open(path);
  INFO(store.status().toString());
  REQUIRE(store.isOk());
  requireOk((*store)->checkIntegrity());
  auto rounds = (*store)->rounds();
  REQUIRE(rounds.isOk());
  REQUIRE(rounds->size() == last);
  for (uint64_t i = 0; i < last; ++i)
    CHECK((*rounds)[i].round == i + 1);
  CHECK((*store)->participants()->size() == 2 * last);
  auto latest = (*store)->latestCheckpoint();
  REQUIRE(latest.isOk());
  if (last == 0) {
    CHECK_FALSE(latest->has_value());
    return;
  }
  REQUIRE(latest->has_value());
  const Checkpoint expected = makeCheckpoint(last, modelSize);
  CHECK((*latest)->round == last);
  REQUIRE((*latest)->model.size() == expected.model.size());
  CHECK(std::memcmp((*latest)->model.data(), expected.model.data(), expected.model.size() * sizeof(float)) == 0);
  CHECK((*latest)->serverMemory == expected.serverMemory);
  CHECK((*latest)->engineState == expected.engineState);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// In a child about to test permissions: root ignores file modes, so drop to nobody.
bool dropRootPrivileges() {
  if (geteuid() != 0) return true;
  return setgid(65534) == 0 && setuid(65534) == 0;
}

}  // namespace

TEST_CASE("a crash inside a round's transaction leaves the previous rounds intact", "[store][durability]") {
  TempDir dir;
  const std::string path = dir.file("crash.db");
  constexpr uint64_t kCommitted = 3;
  constexpr std::size_t kModel = 50'000;
  const std::string stage = GENERATE("clients", "round", "participants", "checkpoint", "before-commit");
  const bool useExit = GENERATE(false, true);
  CAPTURE(stage, useExit);

  const ChildOutcome child = runChild([&](int fd) {
    bool armed = false;
    StoreOptions options;
    options.faultHook = [&](std::string_view at) {
      if (!armed || at != stage) return;
      writeLine(fd, "dying");
      if (useExit) _exit(42);
      kill(getpid(), SIGKILL);
    };
    Result<std::unique_ptr<Store>> store = Store::open(path, options);
    if (!store) return 1;
    for (uint64_t r = 1; r <= kCommitted; ++r) {
      if (!commitRoundOf(**store, r, kModel)) return 2;
    }
    armed = true;
    (void)commitRoundOf(**store, kCommitted + 1, kModel);
    return 3;  // the hook did not fire
  });
  INFO(child.output);
  if (useExit) {
    REQUIRE(child.exited);
    REQUIRE(child.exitCode == 42);
  } else {
    REQUIRE(child.signal == SIGKILL);
  }

  requireIntactThrough(path, kCommitted, kModel);
  // And the coordinator resumes: round 4 commits now.
  {
    auto store = Store::open(path);
    REQUIRE(store.isOk());
    requireOk(commitRoundOf(**store, kCommitted + 1, kModel));
  }
  requireIntactThrough(path, kCommitted + 1, kModel);
}

TEST_CASE("SIGKILL at random moments never loses a committed round", "[store][durability]") {
  TempDir dir;
  const std::string path = dir.file("random-kill.db");
  constexpr std::size_t kModel = 100'000;  // 400 KB per blob: commits take a while
  std::mt19937 rng(20240613);
  uint64_t lastReported = 0;

  for (int attempt = 0; attempt < 12; ++attempt) {
    const int commitsBeforeKill = std::uniform_int_distribution<int>(1, 3)(rng);
    const int delayUs = std::uniform_int_distribution<int>(0, 4000)(rng);
    CAPTURE(attempt, commitsBeforeKill, delayUs);
    int seen = 0;
    const ChildOutcome child = runChild(
        [&](int fd) {
          Result<std::unique_ptr<Store>> store = Store::open(path);
          if (!store) {
            writeLine(fd, "open failed: " + store.status().toString());
            return 1;
          }
          Result<std::optional<uint64_t>> last = (*store)->lastRecordedRound();
          if (!last) return 2;
          for (uint64_t r = last->value_or(0) + 1;; ++r) {
            Status s = commitRoundOf(**store, r, kModel);
            if (!s) {
              writeLine(fd, "commit failed: " + s.toString());
              return 3;
            }
            writeLine(fd, std::to_string(r));
          }
        },
        [&](pid_t pid, const std::string& line) {
          if (line.empty() || line[0] < '0' || line[0] > '9') return;
          lastReported = std::stoull(line);
          if (++seen == commitsBeforeKill) {
            std::this_thread::sleep_for(std::chrono::microseconds(delayUs));
            kill(pid, SIGKILL);
          }
        });
    INFO(child.output);
    REQUIRE(child.signal == SIGKILL);

    // Every reported round is there; the one in flight may or may not be.
    auto store = Store::open(path);
    REQUIRE(store.isOk());
    const uint64_t last = (*store)->lastRecordedRound()->value_or(0);
    store->reset();
    CHECK(last >= lastReported);
    CHECK(last <= lastReported + 1);
    requireIntactThrough(path, last, kModel);
  }
}

TEST_CASE("a full disk fails the round with a clear error and keeps the rest", "[store][durability]") {
  TempDir dir;
  const std::string path = dir.file("full.db");
  constexpr std::size_t kModel = 20'000;  // two 80 KB blobs per checkpoint
  StoreOptions options;
  options.maxSizeBytes = int64_t{400} * 1024;
  {
    auto store = Store::open(path, options);
    REQUIRE(store.isOk());
    uint64_t r = 1;
    Status s;
    for (; r <= 20; ++r) {
      s = commitRoundOf(**store, r, kModel);
      if (!s) break;
    }
    REQUIRE_FALSE(s.isOk());
    REQUIRE(r > 1);
    CHECK(s.code() == StatusCode::kIo);
    CHECK_THAT(s.message(), Catch::Contains("committing round " + std::to_string(r)));
    CHECK_THAT(s.message(), Catch::Contains("disk full"));
    CHECK_THAT(s.message(), Catch::EndsWith("the round was not recorded"));

    // The connection is still usable and holds the rounds before.
    requireOk((*store)->checkIntegrity());
    CHECK(**(*store)->lastRecordedRound() == r - 1);
    CHECK((*(*store)->latestCheckpoint())->round == r - 1);

    // With room again (a smaller checkpoint fits), the same round commits.
    requireOk(commitRoundOf(**store, r, 10));
  }
  auto store = Store::open(path);
  REQUIRE(store.isOk());
  requireOk((*store)->checkIntegrity());
}

TEST_CASE("a read-only database is a clear error and stays unchanged", "[store][durability]") {
  TempDir dir;
  const std::string path = dir.file("ro.db");
  {
    auto store = Store::open(path);
    REQUIRE(store.isOk());
    requireOk(commitRoundOf(**store, 1, 1000));
  }
  const std::string before = readFile(path);
  REQUIRE_FALSE(before.empty());
  REQUIRE_FALSE(std::filesystem::exists(path + "-wal"));

  std::string expect;
  SECTION("the file is read-only") {
    REQUIRE(chmod(dir.path().c_str(), 0777) == 0);
    REQUIRE(chmod(path.c_str(), 0444) == 0);
    expect = "database '" + path + "' is read-only";
  }
  SECTION("its directory is read-only, so SQLite cannot create the WAL") {
    REQUIRE(chmod(path.c_str(), 0666) == 0);
    REQUIRE(chmod(dir.path().c_str(), 0555) == 0);
    expect = "cannot open database '" + path + "'";
  }

  const ChildOutcome child = runChild([&](int fd) {
    if (!dropRootPrivileges()) return 10;
    Result<std::unique_ptr<Store>> store = Store::open(path);
    if (store) {
      // Opening may succeed on some systems; then the commit must fail.
      Status s = commitRoundOf(**store, 2, 1000);
      writeLine(fd, s.toString());
      return s.isOk() ? 11 : 0;
    }
    writeLine(fd, store.status().toString());
    return 0;
  });
  INFO(child.output);
  REQUIRE(child.exited);
  CHECK(child.exitCode == 0);
  CHECK_THAT(child.output, Catch::Contains(expect));
  CHECK_THAT(child.output, Catch::StartsWith("i/o error"));

  // Unchanged: same bytes, and a writable reopen finds round 1 only.
  CHECK(readFile(path) == before);
  REQUIRE(chmod(dir.path().c_str(), 0700) == 0);
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  requireIntactThrough(path, 1, 1000);
}

TEST_CASE("a report can read a database it may not write", "[store][durability]") {
  TempDir dir;
  const std::string path = dir.file("report-ro.db");
  {
    auto store = Store::open(path);
    REQUIRE(store.isOk());
    requireOk(commitRoundOf(**store, 1, 1000));
    requireOk(commitRoundOf(**store, 2, 1000));
  }
  const std::string before = readFile(path);
  REQUIRE(chmod(path.c_str(), 0444) == 0);
  REQUIRE(chmod(dir.path().c_str(), 0555) == 0);
  const ChildOutcome child = runChild([&](int fd) {
    if (!dropRootPrivileges()) return 10;
    StoreOptions options;
    options.readOnly = true;
    Result<std::unique_ptr<Store>> store = Store::open(path, options);
    if (!store) {
      writeLine(fd, store.status().toString());
      return 1;
    }
    Result<std::vector<RoundRecord>> rounds = (*store)->rounds();
    if (!rounds) {
      writeLine(fd, rounds.status().toString());
      return 2;
    }
    writeLine(fd, std::to_string(rounds->size()));
    return 0;
  });
  INFO(child.output);
  REQUIRE(child.exited);
  CHECK(child.exitCode == 0);
  CHECK(child.output == "2\n");
  CHECK(readFile(path) == before);
  REQUIRE(chmod(dir.path().c_str(), 0700) == 0);
}

TEST_CASE("a database locked by another process fails the round after the busy timeout", "[store][durability]") {
  TempDir dir;
  const std::string path = dir.file("locked.db");
  StoreOptions options;
  options.busyTimeoutMs = 100;
  auto store = Store::open(path, options);
  REQUIRE(store.isOk());
  requireOk(commitRoundOf(**store, 1, 100));

  sqlite3* other = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &other) == SQLITE_OK);
  REQUIRE(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  Status s = commitRoundOf(**store, 2, 100);
  CHECK(s.code() == StatusCode::kTimeout);
  CHECK_THAT(s.message(), Catch::Contains("another process holds the database"));
  CHECK_THAT(s.message(), Catch::Contains("the round was not recorded"));
  REQUIRE(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(other);

  requireOk(commitRoundOf(**store, 2, 100));
  CHECK(**(*store)->lastRecordedRound() == 2);
}
