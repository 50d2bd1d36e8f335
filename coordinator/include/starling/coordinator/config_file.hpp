#pragma once
// Reading a TOML settings file, for the daemon's ConfigBinder and for tools that add
// tables of their own (starling-sim's [[strategy]]). Kept apart from config.hpp so
// that only its users see toml++.

#include <toml++/toml.h>

#include <string>

#include "starling/util/status.hpp"

namespace starling::coordinator {

// Parses path into out. A syntax error is kInvalidArgument naming
// "path:line:column: what is wrong".
Status parseConfigFile(const std::string& path, toml::table& out);

}  // namespace starling::coordinator
