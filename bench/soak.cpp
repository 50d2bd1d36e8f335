// bench/soak: a coordinator under churn for minutes — is anything leaking, is anything lost?
//
// One real `starling-coordinator run` process on 127.0.0.1, and in this process N
// clients (default 1,000), each the real client runtime (client::Participant, mutual
// TLS, its own certificate, a 60-example Fashion-MNIST shard). The clients live in
// groups of G on their own thread and io_context, started over the first minute; a
// group stays for a random 20-60 s,
// then leaves at once (its io_context is stopped and destroyed, so every socket closes
// mid-whatever, as when an app is killed), stays away 1-5 s and comes back with fresh
// state, so it must catch up. Rounds of K clients run all along with a short deadline.
//
// Every 5 s the coordinator's resident set (VmRSS) and open file descriptors are read
// from /proc. The baseline is the mean over the minute after warm-up (the ramp and 30
// s: all groups started, the first rounds done; with --steady, not before the whole
// fleet has joined); the end value the mean over the last minute. At the
// end the coordinator gets SIGTERM, and `report --format json` must show every round
// committed or abandoned with a reason: rounds_lost counts the others and any gap.
//
// Memory per connection: before the fleet arrives, 10 clients connect (too few for a
// round) and the coordinator's RSS with them is the baseline of
// kib_per_idle_conn = (RSS after warm-up - RSS with 10) / (connected - 10), in KiB.
//
// --steady: no churn, every client stays connected (the fleet still ramps up over
// --ramp-s). --storm: after the soak the coordinator is SIGKILLed and restarted on the
// same port and database at once; every client reconnects by itself (its reconnect
// backoff, with jitter), and storm_recover_s is the time from the kill until all N
// have joined the new process and it has committed a round. It counts resumed and
// full handshakes (the join lines say "resumed session").
//
// Last line: summary: clients=N minutes=M rss_growth_pct=X fd_growth=Y rounds_committed=C rounds_lost=L
//   kib_per_idle_conn=K [soak10k_rss_growth=X storm10k_recover_s=S (with --storm; the
//   keys keep their names at other --clients)]

#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <atomic>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <unordered_set>

#include "starling/client/participant.hpp"
#include "starling/data/loaders.hpp"
#include "starling/data/partition.hpp"

#include "support/process.hpp"

namespace {

using namespace starling;
using namespace starling::bench;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr const char* kCoordinatorBin = STARLING_COORDINATOR_BIN;

// Goals of issue 7.
constexpr double kGoalRssGrowthPct = 10;

struct Options {
  int clients = 1000;
  double minutes = 10;
  int groupSize = 20;
  int perRound = 50;
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string model = "mlp:784-16-10";
  uint64_t seed = 1;
  bool keep = false;
  bool steady = false;  // no churn: every client stays connected
  bool storm = false;   // then SIGKILL, restart, and all reconnect at once
  double rampS = 60;    // the fleet arrives over this long
  double stormTimeoutS = 180;
  int threads = 0;                            // coordinator --threads (0: its default)
  std::string certs;                          // certificates made beforehand (init --clients N); empty: made here
  std::vector<std::string> coordinatorExtra;  // more `starling-coordinator run` arguments
};

// Clients connected first, alone, for the per-connection memory baseline.
constexpr int kBaselineClients = 10;

// Every client socket is a descriptor: the soft limit up to the hard one.
void raiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0)
    std::cout << fmt::format("bench-soak: open files limit {}\n", limit.rlim_cur);
}

// One client as the soak keeps it between lives: its TLS context (loaded once) and shard.
struct SoakClient {
  std::string id;
  std::shared_ptr<const net::TlsContext> tls;
  data::Dataset shard;
};

// A group of clients sharing a thread; alive between start() and stop().
class Group {
 public:
  Group(std::vector<SoakClient*> members, net::Endpoint coordinator, std::shared_ptr<spdlog::logger> log)
      : members_(std::move(members)), coordinator_(std::move(coordinator)), log_(std::move(log)) {}
  ~Group() { stop(); }

  void start(uint64_t life) {
    io_ = std::make_unique<asio::io_context>(1);
    participants_.clear();
    for (std::size_t i = 0; i < members_.size(); ++i) {
      client::ParticipantOptions options;
      options.coordinator = coordinator_;
      options.id = members_[i]->id;
      options.seed = life * 7919 + i;
      options.backoffMax = std::chrono::milliseconds(2'000);
      participants_.push_back(std::make_unique<client::Participant>(members_[i]->shard, options, log_));
      asio::co_spawn(*io_, participants_.back()->run(io_->get_executor(), members_[i]->tls),
                     [this](std::exception_ptr e, Status st) {
                       if (e) {
                         failures_.fetch_add(1);
                       } else if (!st) {
                         log_->error("a participant ended: {}", st.message());
                         failures_.fetch_add(1);
                       }
                     });
    }
    thread_ = std::thread([this] { io_->run(); });
    ++lives_;
  }

  // Leaves at once: whatever each client was doing, its connection closes.
  void stop() {
    if (!io_) return;
    io_->stop();
    if (thread_.joinable()) thread_.join();
    io_.reset();  // destroys the suspended coroutines, and with them the connections
    participants_.clear();
  }

  bool running() const { return io_ != nullptr; }
  int size() const { return static_cast<int>(members_.size()); }
  int lives() const { return lives_; }
  int failures() const { return failures_.load(); }

 private:
  std::vector<SoakClient*> members_;
  net::Endpoint coordinator_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<asio::io_context> io_;
  std::vector<std::unique_ptr<client::Participant>> participants_;
  std::thread thread_;
  int lives_ = 0;
  std::atomic<int> failures_{0};
};

struct Sample {
  double atS = 0;
  double rssMiB = 0;
  int fds = 0;
  int connected = 0;  // clients of the running groups
  int joins = 0;      // joins in the coordinator's log so far
  int committed = 0, abandoned = 0;
};

std::optional<Sample> sampleProcess(pid_t pid) {
  Sample s;
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  std::string line;
  bool found = false;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      s.rssMiB = std::strtod(line.c_str() + 6, nullptr) / 1024.0;
      found = true;
    }
  }
  if (!found) return std::nullopt;
  std::error_code ec;
  for (auto it = fs::directory_iterator(fmt::format("/proc/{}/fd", pid), ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    ++s.fds;
  return s;
}

template <class F>
double meanOver(const std::vector<Sample>& samples, double fromS, double toS, F f) {
  double sum = 0;
  int n = 0;
  for (const Sample& s : samples) {
    if (s.atS >= fromS && s.atS <= toS) {
      sum += f(s);
      ++n;
    }
  }
  return n > 0 ? sum / n : NAN;
}

std::vector<std::string> coordinatorArgs(const Options& o, const std::string& dir, const std::string& port = "0") {
  std::vector<std::string> args = {kCoordinatorBin,
                                   "run",
                                   "--certs",
                                   dir + "/certs",
                                   "--listen",
                                   "127.0.0.1:" + port,
                                   "--db",
                                   dir + "/soak.db",
                                   "--name",
                                   "soak",
                                   "--model",
                                   o.model,
                                   "--rounds",
                                   "1000000",
                                   "--clients-per-round",
                                   std::to_string(o.perRound),
                                   "--min-clients",
                                   std::to_string(o.perRound),
                                   "--deadline-ms",
                                   "4000",
                                   "--tau",
                                   "10",
                                   "--batch-size",
                                   "16",
                                   "--uplink",
                                   "topk",
                                   "--uplink-density",
                                   "0.1",
                                   "--downlink",
                                   "topk",
                                   "--downlink-density",
                                   "0.1",
                                   "--heartbeat-ms",
                                   "5000",
                                   "--idle-timeout-ms",
                                   "30000",
                                   "--max-connections",
                                   std::to_string(o.clients + 100)};
  args.insert(args.end(), o.coordinatorExtra.begin(), o.coordinatorExtra.end());
  if (o.threads > 0) {
    args.push_back("--threads");
    args.push_back(std::to_string(o.threads));
  }
  // STARLING_SOAK_WRAP="heaptrack -o /tmp/coord" runs the coordinator under a tool (the
  // RSS read is then the tool's process: for allocation profiles, not for the figures).
  if (const char* wrap = std::getenv("STARLING_SOAK_WRAP"); wrap != nullptr && *wrap != '\0') {
    std::vector<std::string> words;
    std::istringstream in(wrap);
    for (std::string w; in >> w;)
      words.push_back(w);
    args.insert(args.begin(), words.begin(), words.end());
  }
  return args;
}

// Joins logged by a coordinator ("client-3 joined from ..."), and of those resumed.
struct Joins {
  int all = 0;       // join lines
  int distinct = 0;  // clients
  int resumed = 0;   // join lines of resumed TLS sessions
};
Joins countJoins(const std::string& log) {
  Joins j;
  std::unordered_set<std::string> who;
  const std::string marker = " joined from ";
  for (std::size_t at = 0; (at = log.find(marker, at)) != std::string::npos; at += marker.size()) {
    ++j.all;
    const auto bol = log.rfind(' ', at - 1);
    who.insert(log.substr(bol + 1, at - bol - 1));
    const auto eol = log.find('\n', at);
    const std::size_t end = eol == std::string::npos ? log.size() : eol;
    if (std::string_view(log).substr(at, end - at).find(", resumed") != std::string_view::npos) ++j.resumed;
  }
  j.distinct = static_cast<int>(who.size());
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"bench-soak: a coordinator under client churn; RSS, descriptors and rounds over time"};
  app.option_defaults()->always_capture_default();
  app.add_option("--clients", o.clients, "client connections (the real client runtime, in this process)");
  app.add_option("--minutes", o.minutes, "how long the churn goes on");
  app.add_option("--group-size", o.groupSize, "clients that join and leave together (one thread each group)");
  app.add_option("--per-round", o.perRound, "updates that close a round (K)");
  app.add_option("--data", o.data, "Fashion-MNIST directory");
  app.add_option("--seed", o.seed, "seed of lifetimes and shards");
  app.add_flag("--keep", o.keep, "keep the working directory (logs, database)");
  app.add_option("--model", o.model, "model spec (small models let 10,000 clients fit in memory: linear:784-10)");
  app.add_flag("--steady", o.steady, "no churn: every client stays connected for the whole soak");
  app.add_flag("--storm", o.storm,
               "at the end, SIGKILL the coordinator, restart it at once and time all clients' return");
  app.add_option("--ramp-s", o.rampS, "the fleet connects over this many seconds (full TLS handshakes)");
  app.add_option("--storm-timeout-s", o.stormTimeoutS, "give up waiting for the storm's return after this long");
  app.add_option("--threads", o.threads, "coordinator network threads (0: its default)");
  app.add_option("--coordinator-arg", o.coordinatorExtra,
                 "one more argument for `starling-coordinator run` (repeat; e.g. --coordinator-arg=--trim-heap-ms=0)");
  app.add_option("--certs", o.certs,
                 "certificates made beforehand with `starling-coordinator init --clients N` (default: made here)");
  CLI11_PARSE(app, argc, argv);
  if (o.clients < o.perRound || o.clients <= kBaselineClients || o.groupSize < 1 || o.minutes <= 0 || o.rampS < 0 ||
      o.stormTimeoutS <= 0) {
    std::cerr << "bench-soak: need --clients >= --per-round and > " << kBaselineClients
              << ", --group-size >= 1, --minutes > 0, --ramp-s >= 0, --storm-timeout-s > 0\n";
    return 2;
  }
  raiseOpenFileLimit();

  const std::string dir = fs::temp_directory_path() / fmt::format("starling-soak-{}", getpid());
  fs::create_directories(dir);
  std::cout << fmt::format("bench-soak: {} clients in groups of {}, {} per round, {} minutes{}{}; work dir {}\n",
                           o.clients, o.groupSize, o.perRound, o.minutes, o.steady ? ", steady" : ", churn",
                           o.storm ? ", then a restart storm" : "", dir)
            << std::flush;
  const auto initStart = Clock::now();
  if (!o.certs.empty()) {
    std::error_code ec;
    fs::create_directory_symlink(fs::absolute(o.certs), dir + "/certs", ec);
    if (ec || !fs::exists(fmt::format("{}/certs/client-{}.key", dir, o.clients - 1))) {
      std::cerr << "bench-soak: --certs " << o.certs << " has no client-" << o.clients - 1
                << ".key (make it with `starling-coordinator init --out DIR --clients N`)\n";
      return 2;
    }
  } else if (!runToFile({kCoordinatorBin, "init", "--out", dir + "/certs", "--clients", std::to_string(o.clients)},
                        dir + "/init.log")) {
    std::cerr << "bench-soak: `starling-coordinator init` failed (see " << dir << "/init.log)\n";
    return 1;
  }
  if (o.certs.empty())
    std::cout << fmt::format("bench-soak: {} client certificates made in {:.1f} s\n", o.clients,
                             std::chrono::duration<double>(Clock::now() - initStart).count())
              << std::flush;
  auto train = data::loadFashionMnistSplit(o.data, data::FashionMnistSplit::kTrain);
  if (!train) {
    std::cerr << "bench-soak: " << train.status().message() << "\n";
    return 1;
  }

  const std::string coordLog = dir + "/coordinator.log";
  Child coord;
  coord.pid = spawnLogged(coordinatorArgs(o, dir), coordLog);
  const std::string port = waitForPort(coord, coordLog, std::chrono::seconds(30));
  if (port.empty()) {
    killAll({&coord});
    std::cerr << "bench-soak: the coordinator did not start (see " << coordLog << ")\n";
    return 1;
  }
  net::Endpoint endpoint{"127.0.0.1", static_cast<uint16_t>(std::stoi(port))};

  // The clients: certificates loaded once, a 60-example shard each (IID).
  auto parts = data::partitionIid(train->labels(), static_cast<std::size_t>(o.clients), o.seed);
  std::vector<SoakClient> clients(static_cast<std::size_t>(o.clients));
  for (int i = 0; i < o.clients; ++i) {
    auto& c = clients[static_cast<std::size_t>(i)];
    c.id = fmt::format("client-{}", i);
    auto identity =
        net::loadIdentity(dir + "/certs/ca.crt", dir + "/certs/" + c.id + ".crt", dir + "/certs/" + c.id + ".key");
    if (!identity) {
      std::cerr << "bench-soak: " << identity.status().message() << "\n";
      return 1;
    }
    auto tls = net::TlsContext::create(net::TlsRole::kClient, *identity, "127.0.0.1");
    if (!tls) {
      std::cerr << "bench-soak: " << tls.status().message() << "\n";
      return 1;
    }
    c.tls = *tls;
    c.shard = train->subset(parts[static_cast<std::size_t>(i)]);
    if ((i + 1) % 2000 == 0) std::cout << fmt::format("bench-soak: {} clients loaded\n", i + 1) << std::flush;
  }
  train = Status(StatusCode::kClosed, "released");

  auto log = std::make_shared<spdlog::logger>(
      "soak-clients", std::make_shared<spdlog::sinks::basic_file_sink_mt>(dir + "/clients.log"));
  log->set_pattern("%Y-%m-%d %H:%M:%S.%e %l [%n] %v");
  log->set_level(spdlog::level::warn);

  // Group 0 is the 10 baseline clients; the others hold --group-size each.
  std::vector<std::unique_ptr<Group>> groups;
  for (int first = 0; first < o.clients;) {
    const int size = groups.empty() ? kBaselineClients : o.groupSize;
    std::vector<SoakClient*> members;
    for (int i = first; i < std::min(o.clients, first + size); ++i)
      members.push_back(&clients[static_cast<std::size_t>(i)]);
    first += size;
    groups.push_back(std::make_unique<Group>(std::move(members), endpoint, log));
  }

  // The baseline: 10 clients connected (no round: fewer than --per-round), nothing else.
  double rss10 = NAN;
  double fds10 = NAN;  // the coordinator's descriptors then: 10 of them are the clients
  {
    groups[0]->start(o.seed * 7919 + 1);
    const auto since = Clock::now();
    while (countJoins(readFile(coordLog)).distinct < kBaselineClients &&
           Clock::now() - since < std::chrono::seconds(60))
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::this_thread::sleep_for(std::chrono::seconds(5));
    double sum = 0, fdSum = 0;
    for (int i = 0; i < 5; ++i) {
      auto s = sampleProcess(coord.pid);
      sum += s ? s->rssMiB : NAN;
      fdSum += s ? s->fds : NAN;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    rss10 = sum / 5;
    fds10 = fdSum / 5;
    std::cout << fmt::format("bench-soak: coordinator RSS with {} idle clients: {:.1f} MiB\n", kBaselineClients, rss10)
              << std::flush;
  }

  // The schedule: groups start staggered over the first minute (a fleet ramps up;
  // a thousand TLS handshakes at once would take the coordinator's one thread
  // several seconds), then live 20-60 s and stay away 1-5 s, again and again.
  std::mt19937_64 rng(o.seed);
  auto uniform = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  const auto t0 = Clock::now();
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const double endS = o.minutes * 60;
  const double rampS = std::min(o.rampS, endS / 4);
  constexpr double kNever = std::numeric_limits<double>::infinity();
  std::vector<double> nextChange(groups.size());
  nextChange[0] = o.steady ? kNever : uniform(20, 60);  // the baseline group is connected already
  for (std::size_t g = 1; g < groups.size(); ++g)
    nextChange[g] = rampS * static_cast<double>(g - 1) / static_cast<double>(groups.size() - 1);
  double warmupS = std::min(rampS + 30, endS / 3);
  const double windowS = std::min(60.0, endS / 4);

  std::vector<Sample> samples;
  double nextSample = 0;
  int joinsAtLastPrint = 0;
  std::cout << fmt::format("{:>6}  {:>8}  {:>5}  {:>8}  {:>9}  {:>9}  {:>7}\n", "t (s)", "RSS MiB", "fds", "groups",
                           "committed", "abandoned", "joins");
  while (now() < endS) {
    double t = now();
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (t < nextChange[g]) continue;
      if (groups[g]->running()) {
        groups[g]->stop();
        nextChange[g] = t + uniform(1, 5);
      } else {
        groups[g]->start(rng());
        nextChange[g] = o.steady ? kNever : t + uniform(20, 60);
      }
    }
    if (t >= nextSample) {
      reapExited({&coord});
      if (coord.exited) break;
      auto s = sampleProcess(coord.pid);
      if (s) {
        s->atS = t;
        std::string text = readFile(coordLog);
        s->committed = countOccurrences(text, " committed: ");
        s->abandoned = countOccurrences(text, " abandoned: ");
        int joins = countOccurrences(text, " joined from ");
        s->joins = joins;
        int running = 0;
        for (auto& g : groups) {
          running += g->running() ? 1 : 0;
          s->connected += g->running() ? g->size() : 0;
        }
        samples.push_back(*s);
        if (samples.size() % 6 == 1)
          std::cout << fmt::format("{:>6.0f}  {:>8.1f}  {:>5}  {:>4}/{:<3}  {:>9}  {:>9}  {:>7}\n", t, s->rssMiB,
                                   s->fds, running, groups.size(), s->committed, s->abandoned, joins - joinsAtLastPrint)
                    << std::flush;
        if (samples.size() % 6 == 1) joinsAtLastPrint = joins;
      }
      nextSample += 5;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double stoppedAt = now();
  // --steady: the baseline starts once the whole fleet has joined (the coordinator's
  // log counts the joins, whatever its memory and descriptors do), if that is later
  // than the ramp and 30 s: on a slow machine the last connections land after the ramp,
  // and each would count as growth.
  if (o.steady) {
    int fleet = 0;
    for (auto& g : groups)
      fleet += static_cast<int>(g->size());
    const auto all = std::find_if(samples.begin(), samples.end(),
                                  [&](const Sample& x) { return x.atS >= warmupS && x.joins >= fleet; });
    if (all == samples.end())
      std::cout << fmt::format("soak: the fleet of {} never fully joined; the baseline starts at {:.0f} s\n", fleet,
                               warmupS);
    else if (all->atS > warmupS)
      warmupS = std::min(all->atS, stoppedAt - 2 * windowS);
    std::cout << fmt::format("soak: baseline from {:.0f} s ({} joins of a fleet of {})\n", warmupS,
                             all == samples.end() ? 0 : all->joins, fleet);
  }

  // The storm: SIGKILL, restart at once on the same port and database, and wait for
  // every client to be back (each on its own reconnect backoff) and a round committed.
  double stormRecoverS = NAN, stormListenS = NAN, stormAllBackS = NAN;
  Joins stormJoins;
  bool stormDone = false;
  Child restarted;
  std::string restartedLog = dir + "/coordinator-restarted.log";
  reapExited({&coord});
  if (o.storm && !coord.exited) {
    std::cout << fmt::format("\nstorm: SIGKILL to the coordinator (pid {}) with {} clients connected\n", coord.pid,
                             samples.empty() ? 0 : samples.back().connected)
              << std::flush;
    const auto killAt = Clock::now();
    auto since = [&] { return std::chrono::duration<double>(Clock::now() - killAt).count(); };
    kill(coord.pid, SIGKILL);
    waitFor(coord);
    restarted.pid = spawnLogged(coordinatorArgs(o, dir, port), restartedLog);
    if (waitForPort(restarted, restartedLog, std::chrono::seconds(60)).empty()) {
      std::cerr << "bench-soak: the restarted coordinator did not listen (see " << restartedLog << ")\n";
    } else {
      stormListenS = since();
      std::cout << fmt::format("storm: restarted, listening again {:.2f} s after the kill\n", stormListenS);
      std::cout << fmt::format("{:>8}  {:>8}  {:>8}  {:>9}\n", "t (s)", "back", "resumed", "committed") << std::flush;
      double nextPrint = 0;
      int committedWhenBack = -1;
      while (since() < o.stormTimeoutS) {
        std::string text = readFile(restartedLog);
        stormJoins = countJoins(text);
        const int committedNow = countOccurrences(text, " committed: ");
        if (committedWhenBack < 0 && stormJoins.distinct >= o.clients) {
          stormAllBackS = since();
          committedWhenBack = committedNow;
        }
        const bool done = committedWhenBack >= 0 && committedNow > committedWhenBack;
        if (since() >= nextPrint || done) {
          std::cout << fmt::format("{:>8.1f}  {:>8}  {:>8}  {:>9}\n", since(), stormJoins.distinct, stormJoins.resumed,
                                   committedNow)
                    << std::flush;
          nextPrint += 2;
        }
        if (done) {
          stormRecoverS = since();
          stormDone = true;
          break;
        }
        reapExited({&restarted});
        if (restarted.exited) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }
  Child& last = o.storm ? restarted : coord;
  const std::string& lastLog = o.storm ? restartedLog : coordLog;

  for (auto& g : groups)
    g->stop();
  int lives = 0, failures = 0;
  for (auto& g : groups) {
    lives += g->lives();
    failures += g->failures();
  }

  reapExited({&last});
  const bool diedEarly = last.exited || last.pid <= 0;
  if (!diedEarly) {
    kill(last.pid, SIGTERM);
    waitFor(last);
  }
  const std::string reportPath = dir + "/report.json";
  const bool reported =
      runToFile({kCoordinatorBin, "report", "--db", dir + "/soak.db", "--format", "json"}, reportPath);
  int committed = 0, abandonedWithReason = 0, lost = 0, highest = 0;
  for (const std::string& line : reportRoundLines(readFile(reportPath))) {
    int round = static_cast<int>(jsonNumber(line, "round").value_or(0));
    std::string status = jsonString(line, "status").value_or("");
    std::string reason = jsonString(line, "reason").value_or("");
    if (status == "committed") {
      ++committed;
    } else if (status == "abandoned" && !reason.empty()) {
      ++abandonedWithReason;
    } else {
      ++lost;
    }
    highest = std::max(highest, round);
  }
  // A round open when the coordinator was SIGKILLed has no record (its number is not
  // reused: the restarted coordinator goes on after the last committed round + 1).
  // Counted apart as interrupted when it is the gap right after "resumed from round R".
  int interrupted = 0;
  if (o.storm) {
    const std::string text = readFile(restartedLog);
    const std::string marker = "resumed from round ";
    if (auto p = text.find(marker); p != std::string::npos) {
      const int resumedFrom = std::atoi(text.c_str() + p + marker.size());
      std::unordered_set<int> present;
      for (const std::string& line : reportRoundLines(readFile(reportPath)))
        present.insert(static_cast<int>(jsonNumber(line, "round").value_or(0)));
      for (int r = resumedFrom + 1; r <= highest && !present.contains(r); ++r)
        ++interrupted;
    }
  }
  lost += highest - (committed + abandonedWithReason + lost) - interrupted;  // rounds missing from the record

  const double rss0 = meanOver(samples, warmupS, warmupS + windowS, [](const Sample& s) { return s.rssMiB; });
  const double rss1 = meanOver(samples, stoppedAt - windowS, stoppedAt, [](const Sample& s) { return s.rssMiB; });
  const double fd0 = meanOver(samples, warmupS, warmupS + windowS, [](const Sample& s) { return s.fds; });
  const double fd1 = meanOver(samples, stoppedAt - windowS, stoppedAt, [](const Sample& s) { return s.fds; });
  const double rssGrowth = (rss1 - rss0) / rss0 * 100;
  const double fdGrowth = fd1 - fd0;
  // Connections counted on the coordinator's side (its descriptors), not the clients
  // started: a client that could not connect holds no memory there.
  const double connected0 = kBaselineClients + (fd0 - fds10);
  const double kibPerConn = (rss0 - rss10) * 1024.0 / (connected0 - kBaselineClients);
  const bool exitedCleanly = !diedEarly && exitedOk(last);
  constexpr double kGoalKibPerConn = 64, kGoalStormS = 30;

  std::cout << "\n"
            << fmt::format("{:<34} {:>14} {:>14} {:>10}  {}\n", "coordinator", "after warm-up", "last minute", "growth",
                           "goal")
            << fmt::format("{:<34} {:>14.1f} {:>14.1f} {:>9.1f}%  <= {}%: {}\n", "resident set (MiB)", rss0, rss1,
                           rssGrowth, kGoalRssGrowthPct, std::abs(rssGrowth) <= kGoalRssGrowthPct ? "met" : "MISSED")
            << fmt::format("{:<34} {:>14.1f} {:>14.1f} {:>10.1f}  flat: {}\n", "open file descriptors", fd0, fd1,
                           fdGrowth, std::abs(fdGrowth) <= 0.05 * o.clients ? "met" : "MISSED")
            << fmt::format("{:<34} {:>14} peak {:.1f} MiB (rusage)\n", "", "",
                           static_cast<double>(coord.maxRssKiB) / 1024.0)
            << fmt::format(
                   "memory per connection: {:.1f} MiB with {} clients, {:.1f} MiB with {:.0f}: {:.1f} KiB each "
                   "(goal <= {}: {})\n",
                   rss10, kBaselineClients, rss0, connected0, kibPerConn, kGoalKibPerConn,
                   kibPerConn <= kGoalKibPerConn ? "met" : "MISSED");
  if (o.storm)
    std::cout << fmt::format(
        "storm: listening {:.2f} s after the kill, {} of {} clients back at {:.1f} s ({} join lines, {} resumed "
        "sessions), a round committed after that at {:.1f} s (goal <= {} s: {})\n",
        stormListenS, stormJoins.distinct, o.clients, stormAllBackS, stormJoins.all, stormJoins.resumed, stormRecoverS,
        kGoalStormS, stormDone && stormRecoverS <= kGoalStormS ? "met" : "MISSED");
  std::cout << fmt::format(
                   "rounds: {} committed, {} abandoned with a reason, {} open at the SIGKILL (no record), {} "
                   "lost (goal 0: {})\n",
                   committed, abandonedWithReason, interrupted, lost, lost == 0 && reported ? "met" : "MISSED")
            << fmt::format("clients: {} group lives, {} participants ended with an error\n", lives, failures)
            << fmt::format("coordinator: {}\n",
                           exitedCleanly ? "stopped cleanly on SIGTERM" : "FAILED (see " + lastLog + ")");
  std::cout << fmt::format(
      "summary: clients={} minutes={:.1f} rss_growth_pct={:.1f} fd_growth={:.0f} "
      "rounds_committed={} rounds_lost={} soak10k_rss_growth={:.1f} kib_per_idle_conn={:.1f} "
      "storm10k_recover_s={:.1f} storm_resumed={}\n",
      o.clients, stoppedAt / 60, rssGrowth, fdGrowth, committed, lost, rssGrowth, kibPerConn, stormRecoverS,
      stormJoins.resumed);
  if (!o.keep && exitedCleanly && reported) fs::remove_all(dir);
  return exitedCleanly && reported && lost == 0 && (!o.storm || stormDone) ? 0 : 1;
}
