#pragma once
// GET /metrics: the coordinator's metrics in the Prometheus text format (version 0.0.4),
// serialized by prometheus-cpp (docs/dashboard.md lists every metric).

#include <string>

#include "starling/coordinator/server.hpp"

#include "live_state.hpp"

namespace starling::coordinator {

// What the server's counters and the live state say now. `server` may be null (no
// connection metrics then).
std::string metricsText(const LiveCounts& counts, const ServerCounters* server);

}  // namespace starling::coordinator
