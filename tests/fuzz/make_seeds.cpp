// Writes the generated part of the seed corpus: one valid frame per message type,
// one payload per compressor and row sets of each index format, for fuzz-frame,
// fuzz-payload and fuzz-row_set. Run by hand when
// the wire format changes:   build/tests/fuzz/fuzz-make-seeds tests/fuzz/corpus
// (the CSV, LIBSVM, IDX and TOML seeds are written by hand).

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "starling/compression/compressor.hpp"
#include "starling/compression/payload.hpp"
#include "starling/compression/row_set.hpp"
#include "starling/wire/messages.hpp"

namespace {

using namespace starling;
namespace fb = wire::fb;

void save(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// A payload in fuzz_payload.cpp's input layout.
std::vector<uint8_t> payloadInput(const compression::Payload& p) {
  std::vector<uint8_t> out;
  auto put = [&](const void* v, size_t n) {  // (vector::insert here trips GCC 12's -Wstringop-overflow)
    const size_t at = out.size();
    out.resize(at + n);
    if (n > 0) std::memcpy(out.data() + at, v, n);
  };
  const uint8_t head[4] = {static_cast<uint8_t>(p.encoding), static_cast<uint8_t>(p.indexFormat),
                           static_cast<uint8_t>(p.valueFormat), p.levelBits};
  put(head, 4);
  put(&p.count, 4);
  put(&p.selected, 4);
  put(&p.levels, 4);
  put(&p.block, 4);
  put(&p.seed, 8);
  auto bytes = [&](const void* v, size_t n) {
    const auto len = static_cast<uint16_t>(n);
    put(&len, 2);
    put(v, n);
  };
  bytes(p.indices.data(), p.indices.size());
  bytes(p.values.data(), p.values.size());
  bytes(p.scales.data(), p.scales.size() * sizeof(float));
  // fuzz_payload expects the receiver's count when the input's size is even.
  if (out.size() % 2 != 0) out.push_back(0);
  return out;
}

// A top-k payload of d elements with relative indices against fuzz_payload's
// referenceFor(seed, d): stride (seed & 63) + 1, offset (seed >> 8) % stride. Its seed
// field carries `seed` (a top-k payload's is otherwise unused).
bool relativeSeed(const std::filesystem::path& path, compression::CompressorOptions options, size_t d, double density,
                  uint64_t seed) {
  std::vector<float> v(d);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = std::sin(float(i)) * (i % 3 == 0 ? 2.0f : 0.5f);
  const auto stride = static_cast<uint32_t>(seed & 63) + 1;
  std::vector<uint32_t> reference;
  for (auto i = static_cast<uint32_t>((seed >> 8) % stride); i < d; i += stride)
    reference.push_back(i);
  auto comp = compression::makeCompressor("topk", options).value();
  compression::Compressed out;
  compression::Payload p;
  if (!comp->compress(v, {density, 7}, out) || !compression::encodeRelative(out, reference, p)) {
    std::fprintf(stderr, "cannot encode %s\n", path.c_str());
    return false;
  }
  p.seed = seed;
  save(path, payloadInput(p));
  return true;
}

// A row set in fuzz_row_set.cpp's input layout: the universe (u32 LE), then its bytes.
void rowSetSeed(const std::filesystem::path& path, std::vector<uint32_t> rows, uint32_t universe) {
  const auto set = compression::RowSet::fromRows(std::move(rows), universe).value();
  std::vector<uint8_t> out(4);
  std::memcpy(out.data(), &universe, 4);
  const std::vector<uint8_t> bytes = compression::encodeRowSet(set);
  out.resize(4 + bytes.size());
  std::memcpy(out.data() + 4, bytes.data(), bytes.size());
  save(path, out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz-make-seeds CORPUS_DIR\n");
    return 2;
  }
  const std::filesystem::path root(argv[1]);
  std::filesystem::create_directories(root / "frame");
  std::filesystem::create_directories(root / "payload");
  std::filesystem::create_directories(root / "row_set");

  // Row sets: a few rows (delta varint), a sparse set of a 2^20 space (Rice-coded gaps),
  // a dense one (bitmap), and the empty set.
  rowSetSeed(root / "row_set" / "seed-varint", {3, 70, 1000}, 4096);
  {
    std::vector<uint32_t> rows;
    for (uint32_t j = 0; j < 300; ++j)
      rows.push_back((j * 2654435761u) % (1u << 20));
    rowSetSeed(root / "row_set" / "seed-rice", rows, 1u << 20);
    std::vector<uint32_t> dense;
    for (uint32_t j = 0; j < 500; ++j)
      if (j % 3 != 0) dense.push_back(j);
    rowSetSeed(root / "row_set" / "seed-bitmap", dense, 500);
  }
  rowSetSeed(root / "row_set" / "seed-empty", {}, 1u << 20);

  std::vector<float> v(40);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = std::sin(float(i)) * (i % 3 == 0 ? 2.0f : 0.5f);
  struct Case {
    const char* name;
    compression::CompressorOptions options;
    double density;
  };
  compression::CompressorOptions fp16;
  fp16.values = compression::ValueFormat::kFp16;
  compression::CompressorOptions smallBlocks;
  smallBlocks.signBlock = 16;
  compression::CompressorOptions ternary;  // sign-bit values; 10 of 40 indices: Rice-coded
  ternary.values = compression::ValueFormat::kSignBits;
  const Case cases[] = {{"identity", {}, 1.0}, {"fp16", {}, 1.0},          {"topk", {}, 0.1}, {"topk", fp16, 0.5},
                        {"randk", {}, 0.25},   {"sign", smallBlocks, 1.0}, {"qsgd", {}, 1.0}, {"topk", ternary, 0.25}};
  std::vector<compression::Payload> payloads;
  for (const auto& c : cases) {
    auto comp = compression::makeCompressor(c.name, c.options).value();
    compression::Compressed out;
    if (!comp->compress(v, {c.density, 7}, out) || !compression::encode(out, payloads.emplace_back())) {
      std::fprintf(stderr, "cannot compress with %s\n", c.name);
      return 1;
    }
    save(root / "payload" / ("seed-" + std::to_string(payloads.size()) + "-" + c.name), payloadInput(payloads.back()));
  }
  // Relative indices, against fuzz_payload's referenceFor(seed, count): every 4th of 40
  // (kept as a bitmap), and every 2nd of 4,000 with few kept (Rice-coded positions).
  const size_t plain = payloads.size();
  if (!relativeSeed(root / "payload" / ("seed-" + std::to_string(plain + 1) + "-topk-relative"), {}, 40, 0.25, 3) ||
      !relativeSeed(root / "payload" / ("seed-" + std::to_string(plain + 2) + "-topk-relative-rice"), ternary, 4000,
                    0.01, 1))
    return 1;

  auto frame = [&](const std::string& name, const auto& message) {
    save(root / "frame" / ("seed-" + name), wire::encode(message).toVector());
  };
  frame("hello", wire::HelloMsg{"client-0", {}, 600, "linux-x86_64", 3, 42, {}, 0});
  {
    wire::WelcomeMsg w;
    w.clientId = "client-0";
    w.task = "demo";
    w.modelSpec = "mlp:4-10";
    w.hyper = wire::HyperParameters{0.05f, 0.9f, 0.0f, 32, 5, 0.0f, false, 1, 0.0f, 0.0f, 0.0f};
    w.compression = wire::CompressionSettings{"topk", 0.1f, "identity", 1.0f, true, false, 0.0f, false, 23};
    w.round = 3;
    w.model = compression::viewOf(payloads[0]);
    w.modelChecksum = 9;
    w.heartbeatMs = 30000;
    w.lastAcceptedRound = 2;
    w.rounds = 20;
    w.initSeed = 1;
    frame("welcome", w);
  }
  for (size_t i = 0; i < payloads.size(); ++i)
    frame("update-" + std::to_string(i),
          wire::UpdateMsg{4, 3, 600, 5, 2.3f, 1.9f, compression::viewOf(payloads[i]), 1200, {}});
  frame("round-assign", wire::RoundAssignMsg{5,
                                             3,
                                             5,
                                             0.05f,
                                             0.1f,
                                             60000,
                                             {compression::viewOf(payloads[2]), compression::viewOf(payloads[5])},
                                             77,
                                             std::nullopt,
                                             std::nullopt});
  frame("round-result", wire::RoundResultMsg{4, false, "update norm is over 20 x the round's median"});
  frame("heartbeat", wire::HeartbeatMsg{123456});
  frame("bye", wire::ByeMsg{"training complete", true});
  frame("error", wire::ErrorMsg{fb::ErrorCode::Unexpected, "unexpected Welcome message from a client"});
  std::printf("wrote %zu payload and %zu frame seeds to %s\n", payloads.size() + 2, payloads.size() + 7, root.c_str());
  return 0;
}
