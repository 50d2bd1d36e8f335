#pragma once
// Test support: the standard output of a shell command (e.g. a NumPy reference run by
// /usr/bin/python3), or nullopt when it could not be started.

#include <cstdio>
#include <optional>
#include <string>

namespace starling::testing {

inline std::optional<std::string> commandOutput(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string text;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p) != nullptr)
    text += buf;
  pclose(p);
  return text;
}

}  // namespace starling::testing
