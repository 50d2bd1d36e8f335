// Ranks: MPI point-to-point byte messages, or one rank without MPI.
#include "ranks.hpp"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#ifdef STARLING_MPI
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#endif
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

namespace starling::sim {
namespace {

// Started by an MPI launcher: Open MPI's mpirun, or a PMI/PMIx launcher (srun, hydra).
bool underLauncher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

}  // namespace

#ifdef STARLING_MPI
constexpr int kTag = 23;

// Open MPI keeps memory it never frees (its components' tables, allocated in MPI_Init and
// lazily in the first transfers, and the components are unloaded before the leak check,
// so their stacks cannot even be named in a suppression). Under AddressSanitizer the
// allocations made inside MPI calls are left out of the leak check; Starling's own
// buffers are allocated outside them and stay checked.
struct InsideMpi {
#ifdef __SANITIZE_ADDRESS__
  InsideMpi() {
    __lsan_disable();
  }
  ~InsideMpi() {
    __lsan_enable();
  }
#else
  InsideMpi() {}   // NOLINT(modernize-use-equals-default): user-provided, so a guard is not "unused"
  ~InsideMpi() {}  // NOLINT(modernize-use-equals-default)
#endif
  InsideMpi(const InsideMpi&) = delete;
  InsideMpi& operator=(const InsideMpi&) = delete;
};

// Waiting: MPI's blocking calls spin, and a rank that waits for a batch (or rank 0 for
// the others' updates) would take a core from the ranks still training, or from the
// rest of the machine. It polls instead, sleeping between polls: up to 1 ms, small
// against a batch of training.
template <typename Done>
void pollUntil(Done done) {
  auto nap = std::chrono::microseconds(20);
  while (!done()) {
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
}

struct Ranks::Sending {
  std::vector<uint8_t> bytes;
  MPI_Request request = MPI_REQUEST_NULL;
};

bool Ranks::built() {
  return true;
}

Ranks::Ranks(int& argc, char**& argv) {
  if (!underLauncher()) return;
  const InsideMpi mpi;
  MPI_Init(&argc, &argv);
  initialized_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

Ranks::~Ranks() {
  waitSends();
  const InsideMpi mpi;
  if (initialized_) MPI_Finalize();
}

void Ranks::send(int to, std::vector<uint8_t> bytes) {
  auto s = std::make_unique<Sending>();
  s->bytes = std::move(bytes);
  const InsideMpi mpi;
  MPI_Isend(s->bytes.data(), static_cast<int>(s->bytes.size()), MPI_BYTE, to, kTag, MPI_COMM_WORLD, &s->request);
  sending_.push_back(std::move(s));
}

void Ranks::waitSends() {
  for (auto& s : sending_)
    pollUntil([&] {
      int flag = 0;
      const InsideMpi mpi;
      MPI_Test(&s->request, &flag, MPI_STATUS_IGNORE);
      return flag != 0;
    });
  sending_.clear();
}

std::vector<uint8_t> Ranks::receive(int from) {
  MPI_Status status;
  pollUntil([&] {
    int flag = 0;
    const InsideMpi mpi;
    MPI_Iprobe(from, kTag, MPI_COMM_WORLD, &flag, &status);
    return flag != 0;
  });
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::vector<uint8_t> bytes(static_cast<std::size_t>(count));
  const InsideMpi mpi;
  MPI_Recv(bytes.data(), count, MPI_BYTE, from, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  return bytes;
}

void Ranks::abort(int code) {
  if (initialized_) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}
#else
struct Ranks::Sending {};

bool Ranks::built() {
  return false;
}

Ranks::Ranks(int&, char**&) {
  if (underLauncher())
    std::cerr << "starling-sim: started by an MPI launcher, but this build has no MPI (meson -Dmpi): "
                 "every process runs the whole simulation alone\n";
}

Ranks::~Ranks() = default;

void Ranks::send(int, std::vector<uint8_t>) {
  std::cerr << "starling-sim: Ranks::send without MPI\n";
  std::abort();
}

void Ranks::waitSends() {}

std::vector<uint8_t> Ranks::receive(int) {
  std::cerr << "starling-sim: Ranks::receive without MPI\n";
  std::abort();
}

void Ranks::abort(int code) {
  std::exit(code);
}
#endif

}  // namespace starling::sim
