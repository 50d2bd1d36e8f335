// Fuzz target: the coordinator's configuration file. The input is a TOML file given
// to ConfigBinder::applyFile (toml++ parsing, then every key checked against the
// bound settings and converted to its field), then validate().

#include <CLI/CLI.hpp>

#include "starling/coordinator/config.hpp"

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  starling::fuzz::TempFile file(data, size, ".toml");
  CLI::App app;
  starling::coordinator::DaemonConfig config;
  starling::coordinator::ConfigBinder binder(app, config);
  if (!binder.applyFile(file.path())) return 0;
  (void)starling::coordinator::ConfigBinder::validate(config);
  return 0;
}
