#pragma once
// starling-sim's configuration from TOML files and flags: the daemon's settings
// (coordinator/config.hpp), [sim], and [[strategy]] tables. Only the binary and its
// tests link this; the simulator itself (sim.hpp) takes plain structs.

#include <string>
#include <vector>

#include "starling/coordinator/config.hpp"

#include "sim.hpp"

namespace starling::sim {

// Binds the [sim] settings to `binder` (file keys "sim.KEY", flags --KEY).
void bindSimSettings(coordinator::ConfigBinder& binder, SimSettings& settings);

// Reads a config file: [task] [train] [compression] [eval] as starling-coordinator
// reads them and [sim], all through `binder` (its flags override the file), then the
// [[strategy]] tables: each has a name and sections whose keys override the shared
// settings for that strategy (defaults < file < flags < the strategy's own keys).
// A file without strategies runs the shared settings as one strategy, "default".
// `base` is the DaemonConfig `binder` was built on.
Status loadConfig(const std::string& path, coordinator::ConfigBinder& binder, const coordinator::DaemonConfig& base,
                  std::vector<Strategy>& strategies);

// A strategy with the task and engine settings of `config`.
Strategy strategyOf(std::string name, const coordinator::DaemonConfig& config);

// Keeps the strategies named in `only`, in its order (empty: all of them); an unknown
// name is an error naming it.
Status chooseStrategies(std::vector<Strategy>& strategies, const std::vector<std::string>& only);

// Every strategy of a run trains the same model on the same fleet, so they must name
// the same model and read the data alike (task, format, label, test data).
Status checkSameData(const std::vector<Strategy>& strategies);

}  // namespace starling::sim
