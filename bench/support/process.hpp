#pragma once
// Child processes and report parsing shared by the benchmarks that run the real
// binaries (bench/federation, bench/soak): spawn with output to a log file, reap
// with peak RSS, wait for the coordinator's port, read `report --format json`.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace starling::bench {

// Starts argv[0] with stdout and stderr appended to logPath; returns its pid or -1.
inline pid_t spawnLogged(const std::vector<std::string>& args, const std::string& logPath) {
  std::vector<char*> argv;
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addclose(&actions, 0);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

struct Child {
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
  long maxRssKiB = 0;
};

// Reaps every child that has exited, without blocking; records status and peak RSS.
inline void reapExited(const std::vector<Child*>& children) {
  for (Child* c : children) {
    if (c->exited || c->pid <= 0) continue;
    int status = 0;
    rusage ru{};
    pid_t r = wait4(c->pid, &status, WNOHANG, &ru);
    if (r == c->pid) {
      c->exited = true;
      c->status = status;
      c->maxRssKiB = ru.ru_maxrss;
    }
  }
}

// Waits for one child to exit (blocking); records status and peak RSS.
inline void waitFor(Child& c) {
  if (c.exited || c.pid <= 0) return;
  rusage ru{};
  if (wait4(c.pid, &c.status, 0, &ru) == c.pid) c.maxRssKiB = ru.ru_maxrss;
  c.exited = true;
}

// SIGKILLs the children still running, by pid, and reaps them.
inline void killAll(const std::vector<Child*>& children) {
  for (Child* c : children) {
    if (c->exited || c->pid <= 0) continue;
    kill(c->pid, SIGKILL);
    waitFor(*c);
  }
}

inline bool exitedOk(const Child& c) {
  return c.exited && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
}

inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline int countOccurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto p = text.find(needle); p != std::string::npos; p = text.find(needle, p + needle.size()))
    ++n;
  return n;
}

// Runs a command to completion with stdout to outPath; true when it exits 0.
inline bool runToFile(const std::vector<std::string>& args, const std::string& outPath) {
  pid_t pid = spawnLogged(args, outPath);
  if (pid <= 0) return false;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The port a coordinator started with --listen 127.0.0.1:0 logged ("listening on
// 127.0.0.1:PORT"); empty when it exited or did not log it within timeout.
inline std::string waitForPort(Child& coordinator, const std::string& logPath, std::chrono::seconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  const std::string marker = "listening on 127.0.0.1:";
  for (;;) {
    std::string log = readFile(logPath);
    auto p = log.find(marker);
    if (p != std::string::npos) {
      p += marker.size();
      auto e = log.find_first_not_of("0123456789", p);
      if (e != std::string::npos && e > p) return log.substr(p, e - p);
    }
    reapExited({&coordinator});
    if (coordinator.exited || std::chrono::steady_clock::now() - start > timeout) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// ---- `starling-coordinator report --format json` (docs/state.md: one object per line)

// The numeric value of "key" in one JSON object line; nullopt when absent or null.
inline std::optional<double> jsonNumber(const std::string& object, const std::string& key) {
  std::string needle = "\"" + key + "\": ";
  auto p = object.find(needle);
  if (p == std::string::npos) return std::nullopt;
  p += needle.size();
  if (object.compare(p, 4, "null") == 0) return std::nullopt;
  return std::strtod(object.c_str() + p, nullptr);
}

inline std::optional<std::string> jsonString(const std::string& object, const std::string& key) {
  std::string needle = "\"" + key + "\": \"";
  auto p = object.find(needle);
  if (p == std::string::npos) return std::nullopt;
  p += needle.size();
  auto e = object.find('"', p);
  if (e == std::string::npos) return std::nullopt;
  return object.substr(p, e - p);
}

// The lines of the report's "rounds" array, one JSON object each.
inline std::vector<std::string> reportRoundLines(const std::string& json) {
  std::vector<std::string> out;
  auto begin = json.find("\"rounds\": [");
  auto end = json.find("\"participants\": [");
  if (begin == std::string::npos || end == std::string::npos) return out;
  std::istringstream lines(json.substr(begin, end - begin));
  std::string line;
  while (std::getline(lines, line))
    if (line.find("{\"round\": ") != std::string::npos) out.push_back(line);
  return out;
}

}  // namespace starling::bench
