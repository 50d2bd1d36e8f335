#pragma once
// The seeds' two-step placement problem for data-centre runs (issue 22; ALGORITHMS.md
// §9 of the design; docs/placement.md, "The two-step problem"): W workers train a
// logistic regression on a sparse data set with S parameter servers holding its rows.
//   step 1, examples to workers: each worker holds about N / W examples (within a
//     tolerance) and pulls and pushes the rows its examples touch, so the traffic is
//     the sum over workers of |rows touched|: METIS on the example-row bipartite graph
//     (coordinator::placeClients, examples in the clients' place) against random;
//   step 2, rows to servers, after compression: a row's load is the rows a worker pulls
//     and pushes of it per iteration, measured by training, so that each server moves
//     about the same bytes and a worker talks to few servers: METIS
//     (coordinator::placeWeightedRows) against hash and LPT.
// Every combination is measured for traffic, server load and a modelled iteration time
// (TimeModel), with the seconds the partitions took.
//
// The training that measures the rows moved: synchronous full-batch gradient descent on
// "linear:D-1/logistic" (model::Model). Each iteration every worker computes the mean
// logistic-loss gradient over its examples and pushes the gradient's rows: all of them
// without compression, else top-k at the density over its rows' entries with error
// feedback (compression::TopKCompressor, compression::ErrorFeedback). The servers add
// the pushes, weighted by the workers' shares of the examples, and step; then each
// worker pulls those of its rows that some worker pushed (it caches its rows: without
// compression that is all of them, with top-k far fewer, so compression changes the
// pulls too). The first pull of all its rows is set-up, not counted. The bias is one
// dense float every worker pulls and pushes: left out of the traffic.
//
// Pure functions of their inputs: deterministic for a seed (the partition seconds and
// the measured compute aside). Any thread may call them.

#include <cstdint>
#include <string>
#include <vector>

#include "starling/data/dataset.hpp"
#include "starling/util/status.hpp"

#include "placement.hpp"

namespace starling::sim {

// The cost model of one iteration (bulk synchronous: the slowest node sets the pace).
// A row pulled or pushed costs bytesPerRow (a 4-byte index and a 4-byte float) in a message of
// headerBytes more; each (worker, server) pair that shares rows exchanges two messages
// per iteration (the pull's reply and the push). A node moves its bytes, in and out
// together, at bandwidth bytes per second and spends messageSeconds per message:
//   worker w: computeSecondsPerNonZero x (non-zeros of its examples)
//             + bytes_w / bandwidth + messages_w x messageSeconds + 2 x latencySeconds
//   server s: bytes_s / bandwidth + messages_s x messageSeconds
//   iteration: the largest of them.
struct TimeModel {
  double bandwidth = 1.25e9;               // bytes per second: 10 Gbit/s
  double latencySeconds = 50e-6;           // one way, paid by the pull and by the push
  double messageSeconds = 5e-6;            // per message, at each end
  double computeSecondsPerNonZero = 5e-9;  // gradient of a non-zero, forward and backward
  uint32_t bytesPerRow = 8;
  uint32_t headerBytes = 64;
};

// What step 1 keeps balanced among the workers.
enum class Balance {
  kExamples,  // examples per worker within the tolerance (the seeds' constraint)
  kNonZeros,  // non-zeros per worker (the compute of an iteration) within the tolerance
};

struct TwoStepOptions {
  uint32_t workers = 8;  // W >= 1, at most the examples
  uint32_t servers = 8;  // S >= 1, at most the rows touched
  // Top-k density of each worker's push over its rows, in (0, 1]; 0 (or 1) sends
  // every row it touches.
  double density = 0;
  uint32_t iterations = 5;    // of training, measured (>= 1)
  float learningRate = 1.0f;  // of the gradient steps
  Balance balance = Balance::kExamples;
  // The graph METIS partitions in step 1 (placement.hpp; examples in the clients' place).
  coordinator::MetisGraph graph = coordinator::MetisGraph::kBipartiteCut;
  // Step 1: the balanced quantity per worker at most (1 + tolerance) x the mean; step 2:
  // METIS's bound on a server's load.
  double tolerance = 0.05;
  uint64_t seed = 1;  // random's shuffle and METIS's seed
  TimeModel time;
};

// One pair of methods and what it costs per iteration (means over the iterations).
struct TwoStepRow {
  std::string step1;                 // "random" or "metis"
  std::string step2;                 // "hash", "lpt" or "metis"
  double pullRows = 0;               // rows pulled by all workers
  double pushRows = 0;               // rows pushed by all workers
  uint64_t pairs = 0;                // (worker, server) pairs that share rows: they talk every iteration
  double trafficBytes = 0;           // rows x bytesPerRow + 2 x pairs x headerBytes
  double workerRowsMaxOverMean = 0;  // largest |rows touched| of a worker / the mean
  double examplesMaxOverMean = 0;    // step 1's balance: examples and non-zeros per worker
  double nonZerosMaxOverMean = 0;
  double serverLoadMaxOverMean = 0;  // bytes through the busiest server / the mean
  double iterationSeconds = 0;       // TimeModel
  double step1Seconds = 0;           // partition seconds of each step
  double step2Seconds = 0;
  // The placement itself, for checks: per example its worker; the rows some worker
  // touches (ascending) and per entry its server; per worker the rows it touches and
  // how many times over the iterations it pulled and pushed each (parallel to its rows).
  std::vector<uint32_t> workerOf;
  std::vector<uint32_t> rows;
  std::vector<uint32_t> serverOf;
  std::vector<std::vector<uint32_t>> workerRows;
  std::vector<std::vector<uint32_t>> pullCounts;
  std::vector<std::vector<uint32_t>> pushCounts;
};

struct TwoStepReport {
  std::string data;  // what the data set was, for the table's first line
  std::size_t examples = 0;
  std::size_t features = 0;
  std::size_t nonZeros = 0;     // explicit zeros (LIBSVM "262144:0") aside
  std::size_t rowsTouched = 0;  // by some example: the floor of pulls (and pushes) without compression
  TwoStepOptions options;
  std::vector<TwoStepRow> rows;  // step1 x step2: random, metis x hash, lpt, metis
  // The training's logistic loss over all examples before the first and after the last
  // iteration (the same for both step-1 methods without compression), per step-1 method.
  std::vector<std::pair<double, double>> loss;
  double measuredComputeSecondsPerNonZero = 0;  // this machine's, for TimeModel
};

// Runs the problem on a sparse binary data set (labels 0/1). kInvalidArgument naming
// what is wrong: no workers or servers, more workers than examples, more servers than
// rows touched, a dense data set, a density out of [0, 1], no iterations, a data set
// of another task.
Result<TwoStepReport> runTwoStep(const data::Dataset& dataset, std::string description, const TwoStepOptions& options);

// The table (one line per combination), then a line "summary: ..." with random/hash
// against metis/metis: twostep_traffic_ratio, twostep_time_ratio,
// twostep_server_imbalance, twostep_partition_s, twostep_payback_iterations.
std::string twoStepTable(const TwoStepReport& report);

// The placement of every combination as text, for an independent check:
//   combination STEP1 STEP2
//   worker EXAMPLE WORKER          (per example)
//   row ROW SERVER                 (per row touched)
//   moves WORKER ROW:PULLS:PUSHES ...  (per worker: its rows moved, times over the iterations)
std::string twoStepDump(const TwoStepReport& report);

}  // namespace starling::sim
