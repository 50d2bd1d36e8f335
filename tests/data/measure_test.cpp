// Measurements quoted in docs/data.md; hidden from the default run ([.measure]):
//   build-data/tests/data/test-data "[.measure]"
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "starling/data/loaders.hpp"
#include "starling/data/partition.hpp"

using namespace starling::data;
using Clock = std::chrono::steady_clock;

namespace {

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE("measure: loading Fashion-MNIST and gathering minibatches", "[.measure]") {
  const std::string dir = defaultFashionMnistDir();
  if (!std::filesystem::exists(dir)) {
    SUCCEED("skipped: " + dir + " does not exist");
    return;
  }
  auto start = Clock::now();
  auto train = loadFashionMnistSplit(dir, FashionMnistSplit::kTrain);
  const double loadSeconds = secondsSince(start);
  REQUIRE(train.isOk());
  std::printf("load train: %zu examples in %.3f s, %.1f MB held (%zu bytes per example)\n", train->size(), loadSeconds,
              static_cast<double>(train->memoryBytes()) / 1e6, train->memoryBytes() / train->size());

  const std::size_t batch = 64;
  const auto order = partitionIid(train->size(), 1, 1)[0];
  std::vector<uint32_t> shuffled(order.begin(), order.end());
  std::vector<float> out(batch * train->featureDim());
  const int epochs = 5;
  double checksum = 0.0;
  start = Clock::now();
  for (int e = 0; e < epochs; ++e) {
    for (std::size_t b = 0; b + batch <= shuffled.size(); b += batch) {
      train->gather(std::span<const uint32_t>(shuffled).subspan(b, batch), out);
      checksum += out[b % out.size()];
    }
  }
  const double gatherSeconds = secondsSince(start);
  const double examples = static_cast<double>(epochs) * static_cast<double>(shuffled.size() / batch * batch);
  std::printf("gather: batches of %zu, %.0f examples/s, %.2f GB/s of floats written (checksum %.1f)\n", batch,
              examples / gatherSeconds, examples * 784 * 4 / gatherSeconds / 1e9, checksum);

  start = Clock::now();
  const Partition p = partitionDirichlet(train->labels(), 100, 0.1, 1);
  std::printf("partitionDirichlet(60000 labels, 100 clients, alpha 0.1): %.3f s\n", secondsSince(start));
  CHECK(p.size() == 100);
}
