#pragma once
// Test helpers for the Learner's updates: what an update sent, decoded, and a line of
// Learner::writeAudit()'s file.

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "starling/client/learner.hpp"
#include "starling/compression/compressed.hpp"
#include "starling/compression/payload.hpp"

namespace starling::client::test {

// The dense values of the update's payload (d floats).
inline std::vector<float> sent(const LocalUpdate& u, std::size_t d) {
  compression::Compressed c;
  std::vector<float> q(d);
  REQUIRE(compression::decode(u.payload, static_cast<uint32_t>(d), c).isOk());
  REQUIRE(compression::expand(c, q).isOk());
  return q;
}

// The values of the audit line `name` ("computed" or "memory"); empty when absent.
inline std::vector<double> auditLine(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string head;
    s >> head;
    if (head != name) continue;
    std::vector<double> v;
    double x = 0;
    while (s >> x)
      v.push_back(x);
    return v;
  }
  return {};
}

// The uplink memory's invariant from the Learner's audit (LearnerOptions::audit):
// what the coordinator applied (`applied`, the sum of the accepted updates) + the
// memory = the sum of the memory's inputs, to float rounding.
inline void checkAuditInvariant(const Learner& learner, const std::vector<double>& applied) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("starling-audit-" + std::to_string(::getpid()))).string();
  REQUIRE(learner.writeAudit(path).isOk());
  const std::vector<double> computed = auditLine(path, "computed"), memory = auditLine(path, "memory");
  std::remove(path.c_str());
  REQUIRE(computed.size() == applied.size());
  REQUIRE(memory.size() == applied.size());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < applied.size(); ++i) {
    worst = std::max(worst, std::fabs(applied[i] + memory[i] - computed[i]));
    scale = std::max(scale, std::fabs(computed[i]));
  }
  CHECK(scale > 0);
  CHECK(worst <= 1e-5 * std::max(1.0, scale));
}

}  // namespace starling::client::test
