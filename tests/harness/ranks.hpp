#pragma once
// The processes of one starling-sim run (docs/simulation.md "On MPI"). Under mpirun,
// rank 0 runs the engine and the event queue and every rank, rank 0 included, trains
// the clients it owns (client i on rank i mod R); without mpirun, or in a build
// without MPI, there is one rank and nothing here talks to anyone.
//
// Messages are byte strings between rank 0 and one other rank, in order per pair
// (MPI's point-to-point order). Used from one thread only: main's.

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "starling/util/status.hpp"

namespace starling::sim {

class Ranks {
 public:
  // Joins the run mpirun started (MPI_Init) when this build has MPI and the
  // environment names an MPI job; otherwise one rank. Start-up only.
  Ranks(int& argc, char**& argv);
  ~Ranks();  // MPI_Finalize, when it initialized MPI
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The rank that trains client i.
  int ownerOf(std::size_t client) const { return static_cast<int>(client % static_cast<std::size_t>(size_)); }
  static bool built();  // this build has MPI

  // Starts sending `bytes` to rank `to` (kept until waitSends()).
  void send(int to, std::vector<uint8_t> bytes);
  // Waits for every send started.
  void waitSends();
  // The next message from rank `from` (blocks).
  std::vector<uint8_t> receive(int from);
  // Ends every rank of the run (MPI_Abort); exits when there is one.
  [[noreturn]] void abort(int code);

 private:
  int rank_ = 0, size_ = 1;
  bool initialized_ = false;
  struct Sending;
  std::vector<std::unique_ptr<Sending>> sending_;
};

// The messages' encoding: fixed-width little-endian numbers and length-prefixed bytes,
// between processes of one build on one kind of machine.
class ByteWriter {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof v);
  }
  void putBytes(std::span<const uint8_t> b) {
    put<uint64_t>(b.size());
    bytes_.insert(bytes_.end(), b.begin(), b.end());
  }
  void putFloats(std::span<const float> f) { putBytes({reinterpret_cast<const uint8_t*>(f.data()), f.size_bytes()}); }
  bool empty() const { return bytes_.empty(); }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

// Reads what a ByteWriter wrote; a short message is kMalformed, naming `what`.
class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}
  template <typename T>
  Result<T> get() {
    if (bytes_.size() - at_ < sizeof(T)) return short_();
    T v;
    std::memcpy(&v, bytes_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  Result<std::span<const uint8_t>> getBytes() {
    auto n = get<uint64_t>();
    if (!n) return n.status();
    if (bytes_.size() - at_ < *n) return short_();
    std::span<const uint8_t> b = bytes_.subspan(at_, *n);
    at_ += *n;
    return b;
  }
  Result<std::vector<float>> getFloats() {
    auto b = getBytes();
    if (!b) return b.status();
    if (b->size() % sizeof(float) != 0) return short_();
    std::vector<float> f(b->size() / sizeof(float));
    std::memcpy(f.data(), b->data(), b->size());
    return f;
  }

 private:
  Status short_() const { return Status(StatusCode::kMalformed, what_ + ": the message ends early"); }
  std::span<const uint8_t> bytes_;
  std::size_t at_ = 0;
  std::string what_;
};

}  // namespace starling::sim
