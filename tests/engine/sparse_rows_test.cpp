// Sparse models in the engine (issue 22): a client holding the view of some rows is
// brought to each round's model by the view's values (the whole view after it joins,
// then the view's coordinates changed since, or the dense view when smaller), proved by
// the view's checksum; its compact update lands at the view's full positions.
#include "starling/coordinator/sparse_rows.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

#include "starling/compression/payload.hpp"
#include "starling/compression/row_set.hpp"
#include "starling/coordinator/client_rows.hpp"
#include "starling/coordinator/round_engine.hpp"
#include "starling/model/model.hpp"
#include "starling/model/row_view.hpp"
#include "starling/util/checksum.hpp"

#include "fixtures.hpp"

using namespace starling;
using namespace starling::coordinator;
using namespace starling::coordinator::testing;

namespace {

constexpr std::size_t kInputs = 999;  // linear:999-1/logistic: 1,000 parameters

std::shared_ptr<const model::Model> linearModel() {
  auto m = model::Model::fromSpec("linear:999-1/logistic");
  REQUIRE(m.isOk());
  return std::make_shared<const model::Model>(std::move(*m));
}

std::shared_ptr<const model::RowView> viewOf(std::vector<uint32_t> rows) {
  return created(model::RowView::create(*linearModel(), std::move(rows)));
}

// The rows as a client offers them and the coordinator keeps them.
std::shared_ptr<const ClientRowSet> offered(const std::vector<uint32_t>& rows) {
  auto set = compression::RowSet::fromSorted(rows, kInputs);
  REQUIRE(set.isOk());
  return created(ClientRowSet::create(linearModel(), compression::encodeRowSet(*set), 1));
}

std::vector<float> startModel() {
  std::vector<float> m(kInputs + 1);
  for (std::size_t i = 0; i < m.size(); ++i)
    m[i] = 0.001f * static_cast<float>(i % 97) - 0.04f;
  return m;
}

// The view's client: applies an assignment to its compact model as a Learner does.
void apply(const Assignment& a, std::size_t m, std::vector<float>& compact) {
  if (a.denseModel) compact = *a.denseModel;
  if (a.values) {
    compression::Compressed v;
    REQUIRE(compression::decode(*a.values, static_cast<uint32_t>(m), v).isOk());
    REQUIRE(compression::overwrite(v, compact).isOk());
  }
  CHECK(a.broadcasts.empty());
  REQUIRE(compact.size() == m);
  CHECK(checksum64(compact) == a.baseChecksum);
}

// A compact update as its Update carries it, decoded and placed by the coordinator.
IncomingUpdate compactUpdate(uint64_t round, uint64_t base, const std::vector<float>& delta,
                             const model::RowView& view) {
  compression::Compressed c = dense(delta);
  compression::Payload p;
  REQUIRE(compression::encode(c, p).isOk());
  IncomingUpdate u = update(round, base, {});
  REQUIRE(decodeUpdate(compression::viewOf(p), &view, kInputs + 1, u.delta).isOk());
  return u;
}

}  // namespace

TEST_CASE("a client holding a view gets the view's values, then what changed in it", "[engine][sparse-rows]") {
  EngineConfig config;
  config.rounds = 3;
  config.clientsPerRound = 2;
  config.overSelection = 1.0;
  config.deadlineMs = 1000;
  config.tau = 10;
  config.stepBudgets = false;
  config.downlink = "topk";  // ten coordinates a round: few of them in the view
  config.downlinkDensity = 0.01;
  auto engine = created(RoundEngine::create(config, startModel()));
  std::vector<uint32_t> rows;
  for (uint32_t j = 0; j < 200; j += 2)
    rows.push_back(j);  // 100 rows: 100 weights and the bias
  const auto view = viewOf(rows);
  REQUIRE(view->size() == 101);
  const auto kept = offered(rows);
  CHECK(kept->viewSize() == 101);
  CHECK(kept->rows() == 100);
  CHECK(kept->bytes().size() < 100);  // the gaps, Rice-coded: under a byte a row

  engine->clientJoined("dense", 100, 0, 0, 0);
  auto acts = engine->clientJoined("sparse", 100, 0, 0, 0, kept);
  auto assigns = only<Assign>(acts);
  REQUIRE(assigns.size() == 2);
  const Assignment& first = assigns[0].clientId == "sparse" ? assigns[0].assignment : assigns[1].assignment;
  // Just joined: the whole view (the compact model's own initialization is not it).
  REQUIRE(first.denseModel);
  CHECK(first.denseModel->size() == view->size());
  CHECK(*first.denseModel == view->gather(engine->model()));
  std::vector<float> compact;
  apply(first, view->size(), compact);

  // The view's update moves the first row's weight and the bias; the dense client moves
  // coordinate 1, which is not in the view.
  std::vector<float> delta(view->size(), 0.0f);
  delta[0] = 0.5f;
  delta[100] = -0.25f;
  std::vector<float> denseDelta(kInputs + 1, 0.0f);
  denseDelta[1] = 0.75f;
  const std::vector<float> before(engine->model().begin(), engine->model().end());
  engine->updateArrived("sparse", compactUpdate(1, 0, delta, *view), 10);
  acts = engine->updateArrived("dense", update(1, 0, denseDelta), 20);
  REQUIRE(engine->committedRound() == 1);
  // FedAvg of the two (equal weights): each moved by half its own step, at full
  // positions 0 (row 0's weight) and 999 (the bias), and 1.
  CHECK(engine->model()[0] == Approx(before[0] - 0.25f));
  CHECK(engine->model()[999] == Approx(before[999] + 0.125f));
  CHECK(engine->model()[1] == Approx(before[1] - 0.375f));
  CHECK(engine->model()[2] == before[2]);

  assigns = only<Assign>(acts);
  REQUIRE(assigns.size() == 2);
  const Assignment& second = assigns[0].clientId == "sparse" ? assigns[0].assignment : assigns[1].assignment;
  // Only the view's coordinates the broadcast changed (0 and 999 among its ten; the
  // others it sent are zeros), by value.
  REQUIRE(second.values);
  CHECK_FALSE(second.denseModel);
  compression::Compressed v;
  REQUIRE(compression::decode(*second.values, static_cast<uint32_t>(view->size()), v).isOk());
  CHECK(v.indices.size() <= 10);
  CHECK(std::find(v.indices.begin(), v.indices.end(), 0u) != v.indices.end());
  CHECK(std::find(v.indices.begin(), v.indices.end(), 100u) != v.indices.end());
  apply(second, view->size(), compact);
  CHECK(compact == view->gather(engine->model()));
  CHECK(second.values->byteSize() < view->size() * sizeof(float) / 4);
}

TEST_CASE("a compact update is placed at the view's positions whatever its encoding", "[engine][sparse-rows]") {
  const auto view = viewOf({3, 4, 700});
  compression::Compressed top;
  top.encoding = compression::Encoding::kTopK;
  top.count = 4;
  top.indices = {1, 3};
  top.values = {2.0f, -1.0f};
  compression::Payload p;
  REQUIRE(compression::encode(top, p).isOk());
  compression::Compressed placed;
  REQUIRE(decodeUpdate(compression::viewOf(p), view.get(), kInputs + 1, placed).isOk());
  CHECK(placed.count == kInputs + 1);
  CHECK(placed.indices == std::vector<uint32_t>{4, 999});
  CHECK(placed.values == std::vector<float>{2.0f, -1.0f});
  // A dense tensor over the view becomes one value per view parameter.
  REQUIRE(compression::encode(dense({1, 2, 3, 4}), p).isOk());
  REQUIRE(decodeUpdate(compression::viewOf(p), view.get(), kInputs + 1, placed).isOk());
  CHECK(placed.indices == std::vector<uint32_t>{3, 4, 700, 999});
  CHECK(placed.values == std::vector<float>{1, 2, 3, 4});
  // A tensor of the whole model's size from a view client is malformed.
  REQUIRE(compression::encode(dense(std::vector<float>(kInputs + 1, 1.0f)), p).isOk());
  CHECK_FALSE(decodeUpdate(compression::viewOf(p), view.get(), kInputs + 1, placed).isOk());
}
