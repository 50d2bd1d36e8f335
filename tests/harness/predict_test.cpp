// Round-time prediction (predict.hpp) and the device profile's JSON (client/profile.hpp).

#include "predict.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "starling/client/profile.hpp"

using namespace starling;
using client::DeviceProfile;
using sim::PredictFleet;

namespace {

// A device whose figures make every time below a sum of round numbers.
DeviceProfile syntheticProfile() {
  DeviceProfile p;
  p.task.model = "mlp:4-3-2";
  p.task.uplink = "topk";
  p.task.uplinkDensity = 0.25;
  p.task.errorFeedback = true;
  p.params = 1000;  // a dense model (4000 bytes) is more than a broadcast
  p.repeats = 3;
  p.steps = {{16, 0.006}, {32, 0.01}, {64, 0.02}};
  p.runOverheadSeconds = 0.1;
  p.compressSeconds = 0.02;
  p.encodeSeconds = 0.03;
  p.decodeSeconds = 0.04;
  p.updateBytes = 1000;
  p.broadcastBytes = 2000;
  p.broadcastCompressSeconds = 0.05;
  p.evalSecondsPerExample = 0;
  return p;
}

PredictFleet oneClient() {
  PredictFleet f;
  f.clients = 1;
  f.tau = 10;
  f.batch = 32;
  f.uplinkMbps = 1;
  f.downlinkMbps = 2;
  f.latencyMs = 10;
  f.rounds = 3;
  return f;
}

// The prediction for `f` over syntheticProfile(), which must succeed.
sim::Prediction predicted(const PredictFleet& f) {
  auto p = sim::predict(syntheticProfile(), f);
  return *p;
}

std::string writeTemp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

// profileToJson() with `from` replaced by `to` (once).
std::string edited(const std::string& from, const std::string& to) {
  std::string json = client::profileToJson(syntheticProfile());
  const auto at = json.find(from);
  REQUIRE(at != std::string::npos);
  return json.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("a profile survives its JSON unchanged", "[predict]") {
  DeviceProfile p = syntheticProfile();
  p.loadSeconds = 0.125;
  const std::string path = writeTemp("starling-profile-roundtrip.json", client::profileToJson(p));
  auto back = client::readProfile(path);
  REQUIRE(back);
  CHECK(back->task.model == p.task.model);
  CHECK(back->task.uplink == "topk");
  CHECK(back->task.uplinkDensity == 0.25);
  CHECK(back->task.errorFeedback);
  CHECK_FALSE(back->task.fp16Values);
  CHECK(back->params == 1000);
  REQUIRE(back->steps.size() == 3);
  CHECK(back->steps[1].batch == 32);
  CHECK(back->steps[1].stepSeconds == 0.01);
  CHECK(back->updateBytes == 1000);
  CHECK(back->broadcastBytes == 2000);
  CHECK(back->decodeSeconds == 0.04);
  CHECK(back->loadSeconds == 0.125);
  CHECK(client::profileToJson(*back) == client::profileToJson(p));
  std::filesystem::remove(path);
}

TEST_CASE("a bad profile is refused with its file, line and what is wrong", "[predict]") {
  SECTION("missing file") {
    auto r = client::readProfile("/nonexistent/profile.json");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.status().message(), Catch::Contains("/nonexistent/profile.json"));
  }
  SECTION("a number that is a string") {
    auto r = client::profileFromJson(edited("\"update_bytes\": 1000", "\"update_bytes\": \"1000\""), "p.json");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.status().message(),
               Catch::Contains("p.json:") && Catch::Contains("\"update_bytes\" must be a number"));
  }
  SECTION("a missing key") {
    auto r = client::profileFromJson(edited("  \"decode_seconds\": 0.04,\n", ""), "p.json");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.status().message(), Catch::Contains("no \"decode_seconds\""));
  }
  SECTION("an unknown key names its line") {
    auto r = client::profileFromJson(edited("  \"repeats\": 3,\n", "  \"repeats\": 3,\n  \"colour\": 1,\n"), "p.json");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.status().message(), Catch::Contains("p.json:15: unknown key \"colour\""));
  }
  SECTION("broken syntax names its line") {
    auto r = client::profileFromJson(edited("\"params\": 1000,", "\"params\": 1000"), "p.json");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.status().message(), Catch::Contains("p.json:5: expected ',' or '}'"));
  }
  SECTION("another file format") {
    auto r = client::profileFromJson(edited("starling-profile", "something-else"), "p.json");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.status().message(), Catch::Contains("p.json:2:") && Catch::Contains("not \"starling-profile\""));
  }
  SECTION("batch sizes out of order") {
    auto r = client::profileFromJson(edited("\"batch\": 64", "\"batch\": 8"), "p.json");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.status().message(), Catch::Contains("increasing batch sizes"));
  }
  SECTION("a negative time") {
    auto r = client::profileFromJson(edited("\"encode_seconds\": 0.03", "\"encode_seconds\": -1"), "p.json");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.status().message(), Catch::Contains("\"encode_seconds\" is -1, below 0"));
  }
}

TEST_CASE("step time is interpolated between profiled batch sizes", "[predict]") {
  const DeviceProfile p = syntheticProfile();
  CHECK(p.trainSeconds(10, 32) == Approx(0.1 + 10 * 0.01));
  CHECK(p.trainSeconds(10, 48) == Approx(0.1 + 10 * 0.015));
  CHECK(p.trainSeconds(10, 128) == Approx(0.1 + 10 * 0.04));  // extrapolated from 32 and 64
}

TEST_CASE("one client without contention: seconds per round as computed by hand", "[predict]") {
  // Round 1: the assignment is a bare frame (256 bytes: the client builds the round-0
  // model), 256 x 8 / 2 Mbit/s + 10 ms = 11.024 ms; the run 0.1 + 10 x 0.01, compression
  // 0.02, encoding 0.03 = 0.25 s; the update (1000 + 256) x 8 / 1 Mbit/s + 10 ms =
  // 20.048 ms; decoding 0.04 s; the commit 0.05 s. Rounds 2 and 3 carry one broadcast:
  // (2000 + 256) x 8 / 2 + 10 ms = 19.024 ms.
  const double round1 = 0.011024 + 0.25 + 0.020048 + 0.04 + 0.05;
  const double later = 0.019024 + 0.25 + 0.020048 + 0.04 + 0.05;
  auto p = predicted(oneClient());
  REQUIRE(p.roundEnds.size() == 3);
  CHECK(p.roundEnds[0] == Approx(round1).epsilon(1e-9));
  CHECK(p.secondsToRounds == Approx(round1 + 2 * later).epsilon(1e-9));
  CHECK(p.secondsPerRound == Approx((round1 + 2 * later) / 3).epsilon(1e-9));
  CHECK(p.clientComputeS == Approx(0.25));
}

TEST_CASE("async: a client is not assigned twice from the same model", "[predict]") {
  PredictFleet f = oneClient();
  f.async = true;
  f.buffer = 1;
  f.rounds = 2;
  auto p = predicted(f);
  REQUIRE(p.roundEnds.size() == 2);
  // Update decoded at 0.011024 + 0.25 + 0.020048 + 0.04; the server step ends 0.05
  // later. Only then is the client assigned again (its last assignment was from the
  // model the step replaces), with one broadcast: 19.024 ms.
  const double decoded = 0.011024 + 0.25 + 0.020048 + 0.04;
  CHECK(p.roundEnds[0] == Approx(decoded + 0.05).epsilon(1e-9));
  CHECK(p.roundEnds[1] == Approx(decoded + 0.05 + 0.019024 + 0.25 + 0.020048 + 0.04 + 0.05).epsilon(1e-9));
}

TEST_CASE("a client's first round carries the loading of its data", "[predict]") {
  DeviceProfile profile = syntheticProfile();
  profile.loadSeconds = 0.5;
  auto p = sim::predict(profile, oneClient());
  REQUIRE(p);
  REQUIRE(p->roundEnds.size() == 3);
  // As computed by hand without the load (above), plus 0.5 s in round 1 only.
  const double round1 = 0.011024 + 0.25 + 0.020048 + 0.04 + 0.05;
  const double later = 0.019024 + 0.25 + 0.020048 + 0.04 + 0.05;
  CHECK(p->roundEnds[0] == Approx(round1 + 0.5).epsilon(1e-9));
  CHECK(p->secondsToRounds == Approx(round1 + 0.5 + 2 * later).epsilon(1e-9));
}

TEST_CASE("a committed round's record on disk delays the next round", "[predict]") {
  PredictFleet f = oneClient();
  f.storeSeconds = 0.2;
  auto p = predicted(f);
  REQUIRE(p.roundEnds.size() == 3);
  // As computed by hand (above): a round ends at its commit, and the next assignment
  // leaves 0.2 s after it, once the round is on disk.
  const double round1 = 0.011024 + 0.25 + 0.020048 + 0.04 + 0.05;
  const double later = 0.019024 + 0.25 + 0.020048 + 0.04 + 0.05;
  CHECK(p.roundEnds[0] == Approx(round1).epsilon(1e-9));
  CHECK(p.roundEnds[1] == Approx(round1 + 0.2 + later).epsilon(1e-9));
  CHECK(p.roundEnds[2] == Approx(round1 + 2 * (0.2 + later)).epsilon(1e-9));
  CHECK(p.commitS == Approx(0.05 + 0.2));

  SECTION("a negative figure is refused by name") {
    f.storeSeconds = -1;
    auto bad = sim::predict(syntheticProfile(), f);
    REQUIRE_FALSE(bad);
    CHECK_THAT(bad.status().message(), Catch::Contains("--store-ms"));
  }
}

TEST_CASE("the coordinator's strand decodes one update at a time", "[predict]") {
  PredictFleet f = oneClient();
  f.clients = 2;
  f.rounds = 1;
  auto p = predicted(f);
  // Both updates arrive at 0.011024 + 0.25 + 0.020048, each client on its own device;
  // the strand decodes them one after the other (0.04 s each), then commits.
  CHECK(p.secondsToRounds == Approx(0.011024 + 0.25 + 0.020048 + 0.08 + 0.05).epsilon(1e-9));
}

TEST_CASE("async: updates wait while the strand waits for the previous evaluation", "[predict]") {
  DeviceProfile profile = syntheticProfile();
  profile.evalSecondsPerExample = 1.0;  // an evaluation of one example takes 1 s
  PredictFleet f = oneClient();
  f.clients = 2;
  f.async = true;
  f.buffer = 1;
  f.rounds = 3;
  f.evalExamples = 1;
  auto p = sim::predict(profile, f);
  REQUIRE(p);
  REQUIRE(p->roundEnds.size() == 3);
  // Both updates arrive at a = 0.011024 + 0.25 + 0.020048. Step 1: decode 0.04, commit
  // 0.05; its evaluation runs until a + 0.09 + 1 and client 0 is assigned again. Step 2
  // (client 1's update) ends at a + 0.18, and the strand waits for evaluation 1. Client
  // 0's second update (one broadcast, 19.024 ms; 0.25 s; 20.048 ms) arrives at
  // a + 0.379072 and waits too: decoded from a + 1.09, its step ends at a + 1.18.
  const double a = 0.011024 + 0.25 + 0.020048;
  CHECK(p->roundEnds[0] == Approx(a + 0.09).epsilon(1e-9));
  CHECK(p->roundEnds[1] == Approx(a + 0.18).epsilon(1e-9));
  CHECK(p->roundEnds[2] == Approx(a + 1.18).epsilon(1e-9));
}

TEST_CASE("shared cores slow concurrent clients in proportion, and other groups take their share", "[predict]") {
  PredictFleet f = oneClient();
  f.clients = 2;
  f.rounds = 1;
  f.cores = 1;
  auto p = predicted(f);
  // Both compute 0.25 s at half a core each, both decode at half a core, the commit alone.
  CHECK(p.secondsToRounds == Approx(0.011024 + 0.5 + 0.020048 + 0.08 + 0.05).epsilon(1e-9));
  SECTION("background load takes its share") {
    // Two other busy groups: the federation gets a third of the core, split among its
    // jobs (a sixth each while both clients compute or decode, a third for the commit).
    f.backgroundLoad = 2;
    auto q = predicted(f);
    CHECK(q.secondsToRounds == Approx(0.011024 + 1.5 + 0.020048 + 0.24 + 0.15).epsilon(1e-9));
  }
}

TEST_CASE("the coordinator's link carries one transfer at a time", "[predict]") {
  PredictFleet f = oneClient();
  f.clients = 2;
  f.rounds = 1;
  f.downlinkMbps = 2;
  f.coordinatorMbps = 1;
  auto p = predicted(f);
  // Assignments leave one after the other at 1 Mbit/s (2.048 ms each): the first
  // arrives at 12.048 ms, the second at 14.096 ms. The first update arrives at 262.048
  // + 10.048 + 10 ms and is decoded until 322.096 ms; the second, queued behind it on
  // the coordinator's link, arrives at 264.096 + 18.048 + 10 ms and waits for the
  // strand: decoded from 322.096 ms to 362.096 ms, then the commit.
  CHECK(p.secondsToRounds == Approx(0.282096 + 0.04 + 0.04 + 0.05).epsilon(1e-9));
}

TEST_CASE("over-selection closes the round at the K-th update and a deadline before", "[predict]") {
  PredictFleet f = oneClient();
  f.clients = 4;
  f.perRound = 2;
  f.overSelection = 2;
  f.rounds = 1;
  f.coordinatorMbps = 1;  // the four updates queue: the round needs the first two only
  auto p = predicted(f);
  PredictFleet all = f;
  all.perRound = 4;
  all.overSelection = 1;
  auto q = predicted(all);
  CHECK(p.secondsToRounds < q.secondsToRounds - 0.015);
  SECTION("a deadline closes the round with what arrived") {
    f.deadlineS = 0.2;  // before any update
    auto d = predicted(f);
    CHECK(d.secondsToRounds == Approx(0.2 + 0.05).epsilon(1e-9));
  }
}

TEST_CASE("overlap hides the steps behind the links", "[predict]") {
  PredictFleet f = oneClient();
  f.latencyMs = 200;  // links longer than the run
  auto plain = predicted(f);
  f.overlap = true;
  auto overlapped = predicted(f);
  CHECK(overlapped.secondsToRounds < plain.secondsToRounds - 0.3);
}

TEST_CASE("settings out of range are named", "[predict]") {
  PredictFleet f = oneClient();
  f.overSelection = 0.5;
  auto p = sim::predict(syntheticProfile(), f);
  REQUIRE_FALSE(p);
  CHECK_THAT(p.status().message(), Catch::Contains("--over-selection"));
  f = oneClient();
  f.async = true;
  f.overlap = true;
  CHECK_FALSE(sim::predict(syntheticProfile(), f));
}
