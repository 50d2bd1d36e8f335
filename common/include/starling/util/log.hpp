#pragma once
// Loggers are made once by a binary's main() and passed to the parts that log.

#include <spdlog/logger.h>

#include <memory>
#include <string>

#include "starling/util/status.hpp"

namespace starling {

// A logger writing to stderr, lines like
// "2026-11-21 20:14:47.123 info [coordinator] client-3 joined from ...".
// level: trace, debug, info, warn, error, off.
Result<std::shared_ptr<spdlog::logger>> makeLogger(const std::string& name, const std::string& level = "info");

}  // namespace starling
