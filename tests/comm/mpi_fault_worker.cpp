// Run by mpi_faults.cpp under mpiexec: ten data-parallel "steps" (global counts, a
// loss sum, a barrier), during which the last rank fails at step 3 in the way argv[1]
// names, while the others keep stepping:
//   none          no fault: exits 0
//   kill          raise(SIGKILL): the rank vanishes without a word
//   throw         throws; main catches it and calls mpi_session::abort(e.what())
//   throw_unwind  throws; the exception unwinds through the mpi_session (the backstop)
//   stall         sleeps for ten minutes: only the survivors' timeout can end the step
// argv[2]: the collective timeout in milliseconds.

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>

#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/comm/collectives.hpp"
#include "cascade_rl/comm/mpi_communicator.hpp"
#include "cascade_rl/distributed/global_normalizer.hpp"

namespace {

namespace cr = cascade_rl;

void steps(cr::mpi_communicator& comm, const std::string& mode) {
  const bool faulty = comm.rank() == comm.size() - 1;
  for (int step = 0; step < 10; ++step) {
    if (faulty && step == 3) {
      if (mode == "kill") std::raise(SIGKILL);
      if (mode == "throw" || mode == "throw_unwind")
        throw std::runtime_error("injected fault: rank " + std::to_string(comm.rank()) +
                                 " threw at step 3");
      if (mode == "stall") std::this_thread::sleep_for(std::chrono::minutes(10));
    }
    const cr::loss_counts local{static_cast<std::size_t>(100 + comm.rank()), 4};
    const cr::loss_normalizer normalizer =
        cr::global_normalizer(comm, local, cr::loss_aggregation::token_mean);
    const double loss = cr::all_reduce_value(comm, 1.0 / normalizer.tokens, cr::reduce_op::sum);
    if (loss <= 0) throw std::logic_error("bad loss");
    comm.barrier();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s none|kill|throw|throw_unwind|stall timeout_ms\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const cr::mpi_options options{.timeout = std::chrono::milliseconds(std::atoi(argv[2]))};
  if (mode == "throw_unwind") {
    try {
      cr::mpi_session mpi(argc, argv);
      auto comm = cr::mpi_communicator::world(options);
      steps(comm, mode);
    } catch (const std::exception& e) {  // not reached on the faulty rank: the session aborts
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
    return 0;
  }
  cr::mpi_session mpi(argc, argv);
  auto comm = cr::mpi_communicator::world(options);
  try {
    steps(comm, mode);
  } catch (const std::exception& e) {
    mpi.abort(e.what());
  }
  if (comm.rank() == 0) std::printf("all steps done on %d ranks\n", comm.size());
  return 0;
}
