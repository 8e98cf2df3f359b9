// NCCL all-reduce over every visible GPU of this process (or -g N of them), reported as
// nccl-tests' all_reduce_perf does: per message size, out-of-place and in-place time,
// algorithm bandwidth algbw = bytes / time, and bus bandwidth busbw = algbw * 2(n-1)/n,
// the per-link rate a ring of n ranks must sustain (nccl-tests doc/PERFORMANCE.md), so
// that busbw compares directly with the hardware's link bandwidth whatever n is.
// "#wrong" counts elements off the exact sum after one checked call per size.
//
//   cascade_rl_nccl_all_reduce_bench [-b 8] [-e 128M] [-f 2] [-n 20] [-w 5] [-g all]
//
// Exits 77 (ctest: skipped) when no GPU is present.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cascade_rl/comm/nccl_communicator.hpp"

namespace {

namespace cr = cascade_rl;

std::size_t parse_size(const char* text) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  switch (end != nullptr ? *end : '\0') {
    case 'K': case 'k': value *= 1024.0; break;
    case 'M': case 'm': value *= 1024.0 * 1024.0; break;
    case 'G': case 'g': value *= 1024.0 * 1024.0 * 1024.0; break;
    default: break;
  }
  return static_cast<std::size_t>(value);
}

struct settings {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{128} << 20;
  double factor = 2;
  int iterations = 20;
  int warmup = 5;
  int gpus = 0;  // 0: all visible
};

struct rank_buffers {
  float* send = nullptr;
  float* recv = nullptr;
};

// Time per call in microseconds, over `iterations` calls on every rank after `warmup`.
double time_all_reduce(std::vector<cr::nccl_communicator>& comms, std::vector<rank_buffers>& buffers,
                       std::size_t count, bool in_place, int warmup, int iterations) {
  const auto launch = [&] {
    CASCADE_RL_NCCL_CHECK(ncclGroupStart());
    for (std::size_t r = 0; r < comms.size(); ++r) {
      float* recv = in_place ? buffers[r].send : buffers[r].recv;
      CASCADE_RL_CUDA_CHECK(cudaSetDevice(comms[r].device()));
      comms[r].all_reduce(buffers[r].send, recv, count, cr::reduce_op::sum, comms[r].stream());
    }
    CASCADE_RL_NCCL_CHECK(ncclGroupEnd());
  };
  const auto sync = [&] {
    for (auto& comm : comms) comm.sync_stream(comm.stream());
  };
  for (int i = 0; i < warmup; ++i) launch();
  sync();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) launch();
  sync();
  const std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iterations;
}

// One all-reduce of rank r's values (r + 1) (exact in float): counts wrong elements.
std::size_t check_all_reduce(std::vector<cr::nccl_communicator>& comms,
                             std::vector<rank_buffers>& buffers, std::size_t count, bool in_place) {
  const std::size_t n = comms.size();
  for (std::size_t r = 0; r < n; ++r) {
    std::vector<float> values(count, static_cast<float>(r + 1));
    CASCADE_RL_CUDA_CHECK(cudaSetDevice(comms[r].device()));
    CASCADE_RL_CUDA_CHECK(cudaMemcpy(buffers[r].send, values.data(), count * sizeof(float),
                                     cudaMemcpyHostToDevice));
  }
  time_all_reduce(comms, buffers, count, in_place, 0, 1);
  const float expected = static_cast<float>(n * (n + 1) / 2);
  std::size_t wrong = 0;
  std::vector<float> result(count);
  for (std::size_t r = 0; r < n; ++r) {
    CASCADE_RL_CUDA_CHECK(cudaSetDevice(comms[r].device()));
    CASCADE_RL_CUDA_CHECK(cudaMemcpy(result.data(), in_place ? buffers[r].send : buffers[r].recv,
                                     count * sizeof(float), cudaMemcpyDeviceToHost));
    wrong += static_cast<std::size_t>(
        std::count_if(result.begin(), result.end(), [&](float v) { return v != expected; }));
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "-b") s.min_bytes = parse_size(argv[i + 1]);
    else if (flag == "-e") s.max_bytes = parse_size(argv[i + 1]);
    else if (flag == "-f") s.factor = std::strtod(argv[i + 1], nullptr);
    else if (flag == "-n") s.iterations = std::atoi(argv[i + 1]);
    else if (flag == "-w") s.warmup = std::atoi(argv[i + 1]);
    else if (flag == "-g") s.gpus = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s (flags: -b -e -f -n -w -g)\n", flag.c_str());
      return 2;
    }
  }
  int visible = 0;
  const cudaError_t probe = cudaGetDeviceCount(&visible);
  if (probe != cudaSuccess || visible == 0) {
    std::printf("# no CUDA device (%s): this benchmark needs a GPU; skipped\n",
                probe != cudaSuccess ? cudaGetErrorString(probe) : "0 devices");
    return 77;
  }
  const int n = s.gpus > 0 ? std::min(s.gpus, visible) : visible;
  s.factor = std::max(s.factor, 1.01);
  s.min_bytes = std::max<std::size_t>(s.min_bytes, sizeof(float));

  try {
    std::vector<ncclComm_t> raw(static_cast<std::size_t>(n));
    std::vector<int> devices(static_cast<std::size_t>(n));
    for (int d = 0; d < n; ++d) devices[static_cast<std::size_t>(d)] = d;
    CASCADE_RL_NCCL_CHECK(ncclCommInitAll(raw.data(), n, devices.data()));
    // Several ranks in one thread: the wrappers do not own the communicators, which are
    // finalised together in one NCCL group at the end (one thread cannot finalise them
    // one after the other).
    std::vector<cr::nccl_communicator> comms;
    for (int d = 0; d < n; ++d)
      comms.emplace_back(raw[static_cast<std::size_t>(d)], d, /*owning=*/false);

    std::vector<rank_buffers> buffers(static_cast<std::size_t>(n));
    for (int d = 0; d < n; ++d) {
      CASCADE_RL_CUDA_CHECK(cudaSetDevice(d));
      CASCADE_RL_CUDA_CHECK(cudaMalloc(&buffers[static_cast<std::size_t>(d)].send, s.max_bytes));
      CASCADE_RL_CUDA_CHECK(cudaMalloc(&buffers[static_cast<std::size_t>(d)].recv, s.max_bytes));
    }

    int nccl_version = 0;
    ncclGetVersion(&nccl_version);
    std::printf("# cascade_rl NCCL all-reduce: %d rank(s), one per GPU, NCCL %d\n", n, nccl_version);
    for (int d = 0; d < n; ++d) {
      cudaDeviceProp prop{};
      CASCADE_RL_CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
      std::printf("#  rank %d: device %d %s\n", d, d, prop.name);
    }
    std::printf("#\n#%64s%32s\n", "out-of-place", "in-place");
    std::printf("#%11s%14s%10s%8s%8s%9s%8s%8s%7s%9s%8s%8s%7s\n", "size", "count", "type", "redop",
                "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    std::printf("#%11s%14s%34s%8s%8s%16s%8s%8s\n", "(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)",
                "(us)", "(GB/s)", "(GB/s)");
    const double bus_factor = 2.0 * (n - 1) / n;
    double busbw_sum = 0;
    int sizes = 0;
    for (double bytes_d = static_cast<double>(s.min_bytes); bytes_d <= static_cast<double>(s.max_bytes);
         bytes_d *= s.factor) {
      const std::size_t count = static_cast<std::size_t>(bytes_d) / sizeof(float);
      if (count == 0) continue;
      const std::size_t bytes = count * sizeof(float);
      double time[2], algbw[2], busbw[2];
      std::size_t wrong[2];
      for (int in_place = 0; in_place < 2; ++in_place) {
        wrong[in_place] = check_all_reduce(comms, buffers, count, in_place != 0);
        time[in_place] = time_all_reduce(comms, buffers, count, in_place != 0, s.warmup, s.iterations);
        algbw[in_place] = static_cast<double>(bytes) / (time[in_place] * 1e-6) / 1e9;
        busbw[in_place] = algbw[in_place] * bus_factor;
      }
      std::printf(" %11zu %13zu %9s %7s %7d %8.2f %7.2f %7.2f %6zu %8.2f %7.2f %7.2f %6zu\n", bytes,
                  count, "float", "sum", -1, time[0], algbw[0], busbw[0], wrong[0], time[1],
                  algbw[1], busbw[1], wrong[1]);
      std::fflush(stdout);
      busbw_sum += busbw[0] + busbw[1];
      sizes += 2;
    }
    std::printf("# Avg bus bandwidth    : %g\n", sizes > 0 ? busbw_sum / sizes : 0.0);
    for (int d = 0; d < n; ++d) {
      CASCADE_RL_CUDA_CHECK_NO_THROW(cudaSetDevice(d));
      CASCADE_RL_CUDA_CHECK_NO_THROW(cudaFree(buffers[static_cast<std::size_t>(d)].send));
      CASCADE_RL_CUDA_CHECK_NO_THROW(cudaFree(buffers[static_cast<std::size_t>(d)].recv));
    }
    comms.clear();
    CASCADE_RL_NCCL_CHECK(ncclGroupStart());
    for (ncclComm_t comm : raw) CASCADE_RL_NCCL_CHECK(ncclCommFinalize(comm));
    CASCADE_RL_NCCL_CHECK(ncclGroupEnd());
    for (ncclComm_t comm : raw) CASCADE_RL_NCCL_CHECK(ncclCommDestroy(comm));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
