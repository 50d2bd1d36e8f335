#include "starling/util/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>

namespace starling {

Result<std::shared_ptr<spdlog::logger>> makeLogger(const std::string& name, const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off")
    return Status(StatusCode::kInvalidArgument,
                  "unknown log level '" + level + "' (use trace, debug, info, warn, error or off)");
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto log = std::make_shared<spdlog::logger>(name, sink);
  log->set_pattern("%Y-%m-%d %H:%M:%S.%e %l [%n] %v");
  log->set_level(lvl);
  log->flush_on(spdlog::level::info);
  return log;
}

}  // namespace starling
