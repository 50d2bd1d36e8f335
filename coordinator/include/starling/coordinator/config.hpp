#pragma once
// The daemon's settings: one plain struct, filled from defaults, then a TOML file
// (--config), then command-line flags, each overriding the one before.
//
// Every setting has one name in both places: the file key "section.key" and the
// flag "--key" (e.g. `[task] rounds = 20` and `--rounds 20`). --help lists every
// flag with its default; docs/coordinator.md lists the file keys.

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "starling/coordinator/task.hpp"

namespace starling::coordinator {

struct DaemonConfig {
  EngineConfig engine;
  TaskConfig task;
  // [server]
  std::string listen = "127.0.0.1:7443";
  std::string certs;          // directory with ca.crt, coordinator.crt, coordinator.key
  std::string ca, cert, key;  // override the files in certs
  std::string crl;            // revocation list; default certs/crl.pem when it exists
  std::string db = "starling.db";
  uint32_t maxFrameBytes = 16u << 20;
  int64_t handshakeTimeoutMs = 10'000;
  int64_t idleTimeoutMs = 120'000;
  int64_t frameTimeoutMs = 60'000;
  uint32_t heartbeatMs = 30'000;
  std::size_t maxConnections = 10'000;
  int listenBacklog = 128;    // connections queued for accept (short: see ServerOptions)
  uint32_t threads = 0;       // network threads (TLS handshakes, connections); 0 = one per core, at most 4
  bool tlsResumption = true;  // issue and accept TLS session tickets (clients reconnect without a full handshake)
  // Keep the ticket keys in a file (mode 0600), so that clients resume their sessions
  // after a restart too; off: keys in memory only.
  bool tlsPersistTicketKeys = true;
  std::string tlsTicketKeyFile;  // where; empty: the database's path + ".ticket-keys"
  // The dashboard and /metrics (docs/dashboard.md): HOST:PORT, "" = off; TLS "auto" (beyond
  // a loopback address), "on" or "off".
  std::string http;
  std::string httpTls = "auto";
  int64_t httpLingerMs = 0;      // keep serving the dashboard this long after training ends
  uint32_t trimHeapMs = 10'000;  // return free heap pages to the kernel this often after connections change; 0 = never
};

// Binds every setting of config to a flag of app and remembers its file key.
class ConfigBinder {
 public:
  ConfigBinder(CLI::App& app, DaemonConfig& config);
  // Reads a TOML file into the settings whose flags were not given. The error names
  // the file, the key and what is wrong (unknown key, wrong type).
  Status applyFile(const std::string& path);
  // The same for a file already parsed: `table` is a const toml::table* (void* keeps
  // toml++ out of this header), `origin` names it in errors. Top-level keys listed in
  // `foreign` belong to the caller (the simulator's [fleet] and [[strategy]]) and are
  // skipped; any other unknown key is an error.
  Status applyTable(const void* table, const std::string& origin, const std::vector<std::string>& foreign = {});
  // Checks values no single flag can: e.g. tauMin <= tau <= tauMax.
  static Status validate(const DaemonConfig& config);

  // Binds one more setting, "section.key" in files and --key on the command line
  // (programs built on the daemon's settings add their own, e.g. starling-sim's
  // [sim]). T is bool, int, int64_t, uint32_t, uint64_t, float, double or std::string.
  template <typename T>
  void bind(const std::string& key, T& field, const std::string& help);

 private:
  struct Binding {
    std::string key;  // "task.rounds"
    CLI::Option* option;
    std::function<Status(const void* node)> fromToml;  // node: const toml::node*
  };
  CLI::App& app_;
  std::vector<Binding> bindings_;
};

}  // namespace starling::coordinator
