// Error feedback: nothing is lost. sum(committed q) + e == sum(inputs), for every
// compressor, with and without rollbacks; and the staleness policy.

#include "starling/compression/error_feedback.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <span>
#include <vector>

#include "vectors.hpp"

using namespace starling;
using namespace starling::compression;
using namespace starling::compression::test;

namespace {

// Options each compressor runs with under error feedback (contractive variants).
CompressorOptions efOptions() {
  CompressorOptions o;
  o.qsgdContractive = true;
  o.randkRescale = false;
  return o;
}

ErrorFeedback makeEf(std::size_t d, ErrorFeedbackOptions options = {}) {
  auto ef = ErrorFeedback::create(d, options);
  REQUIRE(ef.isOk());
  return std::move(ef).value();
}

// The largest |sent + e - inputs| relative to the largest |inputs|: 0 when error
// feedback lost nothing.
double residual(const std::vector<double>& sent, std::span<const float> e, const std::vector<double>& inputs) {
  double worst = 0, scale = 1e-3;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    worst = std::max(worst, std::fabs(sent[i] + e[i] - inputs[i]));
    scale = std::max(scale, std::fabs(inputs[i]));
  }
  return worst / scale;
}

// Runs `rounds` rounds; in rounds where reject(r) holds the update is rolled back.
// Returns the largest |sum(sent) + e - sum(inputs)| relative to the largest |sum(inputs)|.
template <typename Reject>
double telescopingError(Compressor& c, std::size_t d, int rounds, double density, Reject reject) {
  auto ef = makeEf(d);
  std::vector<double> inputs(d, 0.0), sent(d, 0.0);
  std::vector<float> q(d);
  Compressed out;
  for (int r = 0; r < rounds; ++r) {
    const auto v = gaussian(d, 100 + r);
    for (std::size_t i = 0; i < d; ++i)
      inputs[i] += v[i];
    REQUIRE(ef.compress(v, c, {density, static_cast<std::uint64_t>(r)}, out).isOk());
    REQUIRE(ef.hasPending());
    if (reject(r)) {
      REQUIRE(ef.rollback().isOk());
      continue;
    }
    REQUIRE(ef.commit().isOk());
    REQUIRE(expand(out, q).isOk());
    for (std::size_t i = 0; i < d; ++i)
      sent[i] += q[i];
  }
  return residual(sent, ef.memory(), inputs);
}

}  // namespace

TEST_CASE("error feedback telescopes: sum(sent) + e_final == sum(inputs)", "[error-feedback]") {
  for (const auto& name : allNames()) {
    DYNAMIC_SECTION(name) {
      auto c = make(name, efOptions());
      SECTION("every update accepted") {
        CHECK(telescopingError(*c, 5000, 60, 0.02, [](int) { return false; }) < 1e-4);
      }
      SECTION("with rollbacks in between") {
        CHECK(telescopingError(*c, 5000, 60, 0.02, [](int r) { return r % 3 == 1 || r == 7; }) < 1e-4);
      }
      SECTION("every update rejected: the memory holds all the inputs") {
        CHECK(telescopingError(*c, 5000, 10, 0.02, [](int) { return true; }) < 1e-5);
      }
    }
  }
}

TEST_CASE("error feedback telescopes with ternary top-k values too", "[error-feedback]") {
  CompressorOptions o = efOptions();
  o.values = ValueFormat::kSignBits;
  for (const char* name : {"topk", "topk-sampled"}) {
    DYNAMIC_SECTION(name) {
      auto c = make(name, o);
      CHECK(telescopingError(*c, 5000, 60, 0.02, [](int) { return false; }) < 1e-4);
      CHECK(telescopingError(*c, 5000, 60, 0.02, [](int r) { return r % 3 == 1; }) < 1e-4);
    }
  }
}

TEST_CASE("error feedback with a clip norm: every message within it, what was clipped kept in the memory",
          "[error-feedback][clip]") {
  CompressorOptions ternary = efOptions();
  ternary.values = ValueFormat::kSignBits;
  for (const auto& [name, options] : std::vector<std::pair<std::string, CompressorOptions>>{
           {"identity", efOptions()}, {"topk", efOptions()}, {"topk", ternary}, {"qsgd", efOptions()}}) {
    DYNAMIC_SECTION(name << " " << int(options.values)) {
      auto c = make(name, options);
      const std::size_t d = 2000;
      auto ef = makeEf(d);
      std::vector<double> inputs(d, 0.0), sent(d, 0.0);
      std::vector<float> q(d);
      Compressed out;
      const double clip = 3.0;  // inputs have norm ~45: every message is clipped
      for (int r = 0; r < 30; ++r) {
        const auto v = gaussian(d, 500 + r);
        for (std::size_t i = 0; i < d; ++i)
          inputs[i] += v[i];
        REQUIRE(ef.compress(v, *c, {0.05, static_cast<std::uint64_t>(r)}, out, 0, clip).isOk());
        CHECK(*l2Norm(out) <= clip);
        CHECK(*l2Norm(out) > clip * 0.99);
        if (r % 4 == 3) {
          REQUIRE(ef.rollback().isOk());
          continue;
        }
        REQUIRE(ef.commit().isOk());
        REQUIRE(expand(out, q).isOk());
        for (std::size_t i = 0; i < d; ++i)
          sent[i] += q[i];
      }
      CHECK(residual(sent, ef.memory(), inputs) < 1e-4);
    }
  }
}

TEST_CASE("error feedback: the memory is e = p - q, and a rollback adds q back", "[error-feedback]") {
  auto c = make("topk");
  auto ef = makeEf(6);
  const std::vector<float> v1 = {1, -5, 2, 0, 4, 3};
  Compressed q;
  REQUIRE(ef.compress(v1, *c, {2.0 / 6, 0}, q).isOk());
  // e <- p - q at once; the commit only forgets q.
  CHECK(std::vector<float>(ef.memory().begin(), ef.memory().end()) == std::vector<float>{1, 0, 2, 0, 0, 3});
  REQUIRE(ef.commit().isOk());
  CHECK(std::vector<float>(ef.memory().begin(), ef.memory().end()) == std::vector<float>{1, 0, 2, 0, 0, 3});
  const std::vector<float> v2 = {1, 0, 0, 0, 0, 0};
  REQUIRE(ef.compress(v2, *c, {2.0 / 6, 0}, q).isOk());  // p = {2, 0, 2, 0, 0, 3}
  CHECK(q.indices == std::vector<std::uint32_t>{0, 5});
  REQUIRE(ef.rollback().isOk());
  CHECK(std::vector<float>(ef.memory().begin(), ef.memory().end()) == std::vector<float>{2, 0, 2, 0, 0, 3});
}

TEST_CASE("error feedback keeps several updates pending and resolves them in any order", "[error-feedback]") {
  // A late update waits for the round that applies it while the client trains the next:
  // two or three pending at once, committed and rolled back out of order.
  auto c = make("topk");
  auto ef = makeEf(500);
  std::vector<double> inputs(500, 0.0), sent(500, 0.0);
  std::vector<float> q(500);
  std::map<std::uint64_t, Compressed> out;
  const auto add = [&](std::uint64_t tag) {
    const auto v = gaussian(500, 1000 + tag);
    for (std::size_t i = 0; i < v.size(); ++i)
      inputs[i] += v[i];
    REQUIRE(ef.compress(v, *c, {0.05, tag}, out[tag], tag).isOk());
  };
  const auto resolve = [&](std::uint64_t tag, bool applied) {
    if (applied) {
      REQUIRE(ef.commit(tag).isOk());
      REQUIRE(expand(out[tag], q).isOk());
      for (std::size_t i = 0; i < q.size(); ++i)
        sent[i] += q[i];
    } else {
      REQUIRE(ef.rollback(tag).isOk());
    }
  };
  add(1);
  add(2);
  CHECK(ef.compress(gaussian(500, 5), *c, {0.05, 2}, out[9], 2).code() == StatusCode::kInvalidArgument);
  add(3);
  CHECK(ef.pendingCount() == 3);
  CHECK(ef.missedRounds(1).code() == StatusCode::kInvalidArgument);
  resolve(2, true);
  resolve(1, false);
  CHECK(ef.commit(1).code() == StatusCode::kInvalidArgument);  // already resolved
  add(4);
  resolve(4, true);
  resolve(3, false);
  CHECK_FALSE(ef.hasPending());
  double worst = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    worst = std::max(worst, std::fabs(sent[i] + ef.memory()[i] - inputs[i]));
  CHECK(worst < 1e-5);
}

TEST_CASE("error feedback refuses out-of-order calls and leaves its state intact", "[error-feedback]") {
  auto c = make("topk");
  auto ef = makeEf(100);
  const auto v = gaussian(100, 1);
  Compressed q;
  CHECK(ef.commit().code() == StatusCode::kInvalidArgument);
  CHECK(ef.rollback().code() == StatusCode::kInvalidArgument);
  CHECK(ef.compress(gaussian(99, 1), *c, {0.1, 0}, q).code() == StatusCode::kInvalidArgument);
  REQUIRE(ef.compress(v, *c, {0.1, 0}, q).isOk());
  CHECK(ef.compress(v, *c, {0.1, 0}, q).code() == StatusCode::kInvalidArgument);
  CHECK(ef.missedRounds(1).code() == StatusCode::kInvalidArgument);
  REQUIRE(ef.commit().isOk());
  SECTION("a compressor error leaves nothing pending and the memory unchanged") {
    const std::vector<float> before(ef.memory().begin(), ef.memory().end());
    auto bad = v;
    bad[3] = std::numeric_limits<float>::quiet_NaN();
    CHECK_FALSE(ef.compress(bad, *c, {0.1, 0}, q).isOk());
    CHECK_FALSE(ef.hasPending());
    CHECK(std::vector<float>(ef.memory().begin(), ef.memory().end()) == before);
  }
  CHECK_FALSE(ErrorFeedback::create(0).isOk());
  CHECK_FALSE(ErrorFeedback::create(10, {1.5f, 0, 0.0}).isOk());
  CHECK_FALSE(ErrorFeedback::create(10, {1.0f, 0, -1.0}).isOk());
}

TEST_CASE("error feedback decays a stale memory and resets it after R missed rounds", "[error-feedback]") {
  auto c = make("topk");
  auto ef = makeEf(1000, {0.5f, 4, 0.0});
  const auto v = gaussian(1000, 2);
  Compressed q;
  REQUIRE(ef.compress(v, *c, {0.01, 0}, q).isOk());
  REQUIRE(ef.commit().isOk());
  const std::vector<float> e0(ef.memory().begin(), ef.memory().end());
  REQUIRE(ef.missedRounds(2).isOk());
  CHECK(ef.consecutiveMissedRounds() == 2);
  for (std::size_t i = 0; i < e0.size(); ++i)
    REQUIRE(ef.memory()[i] == e0[i] * 0.25f);
  REQUIRE(ef.missedRounds(1).isOk());
  CHECK(ef.memory()[0] == e0[0] * 0.125f);
  SECTION("a commit resets the count of missed rounds") {
    REQUIRE(ef.compress(v, *c, {0.01, 0}, q).isOk());
    REQUIRE(ef.commit().isOk());
    CHECK(ef.consecutiveMissedRounds() == 0);
  }
  SECTION("the R-th consecutive missed round clears the memory") {
    REQUIRE(ef.missedRounds(1).isOk());
    for (float e : ef.memory())
      REQUIRE(e == 0.0f);
  }
}

TEST_CASE("error feedback caps ||e|| relative to ||p||", "[error-feedback]") {
  auto c = make("topk");
  auto capped = makeEf(10000, {1.0f, 0, 0.5});
  auto free = makeEf(10000);
  Compressed q;
  for (int r = 0; r < 5; ++r) {
    const auto v = gaussian(10000, 10 + r);
    REQUIRE(capped.compress(v, *c, {0.01, 0}, q).isOk());
    REQUIRE(capped.commit().isOk());
    REQUIRE(free.compress(v, *c, {0.01, 0}, q).isOk());
    REQUIRE(free.commit().isOk());
    CHECK(capped.lastErrorRatio() > 0.5);  // top-k at 1% keeps most of ||p|| in e
  }
  const double cappedNorm = std::sqrt(sqNorm(capped.memory()));
  const double freeNorm = std::sqrt(sqNorm(free.memory()));
  CHECK(cappedNorm < 0.6 * freeNorm);
}

TEST_CASE("the coordinator's downlink uses the same type over aggregated updates", "[error-feedback]") {
  // Three clients with uplink memories; the coordinator averages their q and keeps a
  // downlink memory. Everything the clients fed in is either broadcast or in a memory.
  const std::size_t d = 3000;
  auto up = make("topk", {});
  auto down = make("topk-sampled", {});
  std::vector<ErrorFeedback> clients;
  for (int k = 0; k < 3; ++k)
    clients.push_back(makeEf(d));
  auto server = makeEf(d);
  std::vector<double> inputs(d, 0.0), broadcast(d, 0.0);
  std::vector<float> delta(d), dense(d);
  Compressed q;
  for (int r = 0; r < 30; ++r) {
    std::fill(delta.begin(), delta.end(), 0.0f);
    for (int k = 0; k < 3; ++k) {
      const auto v = gaussian(d, 1000 * r + k);
      for (std::size_t i = 0; i < d; ++i)
        inputs[i] += v[i] / 3.0;
      REQUIRE(clients[k].compress(v, *up, {0.02, 0}, q).isOk());
      if (k == 2 && r % 4 == 0) {  // this client's update misses the round
        REQUIRE(clients[k].rollback().isOk());
        continue;
      }
      REQUIRE(clients[k].commit().isOk());
      REQUIRE(addScaled(q, 1.0f / 3.0f, delta).isOk());
    }
    REQUIRE(server.compress(delta, *down, {0.02, static_cast<std::uint64_t>(r)}, q).isOk());
    REQUIRE(server.commit().isOk());
    REQUIRE(expand(q, dense).isOk());
    for (std::size_t i = 0; i < d; ++i)
      broadcast[i] += dense[i];
  }
  double worst = 0;
  for (std::size_t i = 0; i < d; ++i) {
    double held = server.memory()[i];
    for (auto& c : clients)
      held += c.memory()[i] / 3.0;
    worst = std::max(worst, std::fabs(broadcast[i] + held - inputs[i]));
  }
  CHECK(worst < 1e-3);
}

TEST_CASE("error feedback carries what the other side applied beyond q", "[error-feedback]") {
  auto c = make("topk");
  auto ef = makeEf(4);
  Compressed q;
  REQUIRE(ef.compress(std::vector<float>{1, -4, 2, 0}, *c, {0.25, 0}, q).isOk());  // q sends -4
  REQUIRE(ef.commit().isOk());
  const std::vector<std::uint32_t> at = {1, 3};
  REQUIRE(ef.carry(at, std::vector<float>{0.5f, -0.25f}).isOk());
  CHECK(std::vector<float>(ef.memory().begin(), ef.memory().end()) == std::vector<float>{1, 0.5f, 2, -0.25f});
  REQUIRE(ef.carry({}, std::vector<float>{1, 1, 1, 1}).isOk());
  CHECK(std::vector<float>(ef.memory().begin(), ef.memory().end()) == std::vector<float>{2, 1.5f, 3, 0.75f});
  // Mismatched sizes or an index out of range change nothing.
  CHECK(ef.carry({}, std::vector<float>{1, 1, 1}).code() == StatusCode::kInvalidArgument);
  CHECK(ef.carry(at, std::vector<float>{1}).code() == StatusCode::kInvalidArgument);
  const std::vector<std::uint32_t> bad = {1, 4};
  CHECK(ef.carry(bad, std::vector<float>{1, 1}).code() == StatusCode::kInvalidArgument);
  CHECK(std::vector<float>(ef.memory().begin(), ef.memory().end()) == std::vector<float>{2, 1.5f, 3, 0.75f});
}
