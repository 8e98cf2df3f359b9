// What a sandboxed run pays for the run-level caps of issue 18, and how many runs per
// second a verify_pool sustains. Everything in one process, configurations interleaved
// round by round, so that each sees the same machine (load included):
//   before    namespaces, read-only root, pids cgroup, rlimits: the sandbox before the caps
//   +cgroups  and the memory and CPU cgroups
//   +tmpfs    and a tmpfs scratch directory
//   +filter   and the seccomp filter
//   bound     all three, the file view's directories bound from the host (issue 34,
//             before its overlays)
//   after     all three, the view's directories overlaid: the default
// Each run is a trivial program (/bin/true) in a fresh scratch directory, timed around
// sandbox::run as the caller sees it (scratch directory made and removed included).
//
// usage: sandbox_bench [runs per configuration, 200] [pool workers, 2 x cores]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <cascade_rl/verify/pool.hpp>

namespace v = cascade_rl::verify;

namespace {

struct configuration {
  const char* name;
  bool cgroups, tmpfs, filter, overlays = true;
};

v::sandbox make(const configuration& c) {
  v::sandbox_options options{.on_missing_isolation = v::missing_isolation::warn};
  options.memory_and_cpu_cgroups = c.cgroups;
  options.tmpfs_scratch = c.tmpfs;
  options.syscall_filter.enabled = c.filter;
  options.overlay_view = c.overlays;
  return v::sandbox(options);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 200;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t workers = argc > 2 ? static_cast<std::size_t>(std::atoi(argv[2])) : 2 * cores;
  if (runs < 1 || workers < 1) {
    std::fprintf(stderr, "usage: sandbox_bench [runs per configuration] [pool workers]\n");
    return 2;
  }
  const std::vector<configuration> configurations = {{"before", false, false, false},
                                                     {"+cgroups", true, false, false},
                                                     {"+tmpfs", false, true, false},
                                                     {"+filter", false, false, true},
                                                     {"bound", true, true, true, false},
                                                     {"after", true, true, true}};
  std::vector<v::sandbox> boxes;
  for (const auto& c : configurations) boxes.push_back(make(c));
  std::printf("isolation: %s\n", boxes.back().isolation().describe().c_str());
  const v::command trivial{.argv = {"/bin/true"}};

  // Sequential runs, one of each configuration per round.
  std::vector<std::vector<double>> ms(configurations.size());
  for (int round = 0; round < runs + 5; ++round)
    for (std::size_t k = 0; k < boxes.size(); ++k) {
      const auto start = std::chrono::steady_clock::now();
      const auto r = boxes[k].run(trivial);
      const double t = seconds_since(start) * 1e3;
      if (!r.succeeded()) {
        std::fprintf(stderr, "%s: the trivial program did not succeed (%s)\n", configurations[k].name,
                     std::string(v::to_string(r.reason)).c_str());
        return 1;
      }
      if (round >= 5) ms[k].push_back(t);  // the first rounds warm up
    }
  std::printf("\n%d runs of /bin/true per configuration, one after another (ms per run):\n", runs);
  std::printf("%-10s %8s %8s %8s\n", "", "median", "mean", "p90");
  double before_median = 0;
  for (std::size_t k = 0; k < ms.size(); ++k) {
    auto& t = ms[k];
    std::sort(t.begin(), t.end());
    double mean = 0;
    for (const double x : t) mean += x;
    mean /= static_cast<double>(t.size());
    const double median = t[t.size() / 2], p90 = t[t.size() * 9 / 10];
    if (k == 0) before_median = median;
    std::printf("%-10s %8.2f %8.2f %8.2f", configurations[k].name, median, mean, p90);
    if (k > 0) std::printf("   (%+.2f ms median)", median - before_median);
    std::printf("\n");
  }

  // A pool: runs per second with `workers` threads, before and after.
  std::printf("\npool of %zu workers on %u cores, %d runs of /bin/true:\n", workers, cores, 4 * runs);
  const std::vector<v::command> commands(static_cast<std::size_t>(4 * runs), trivial);
  for (const std::size_t k : {std::size_t{0}, configurations.size() - 1}) {
    const v::verify_pool pool(boxes[k], workers, workers * boxes[k].options().limits.memory_bytes);
    (void)pool.run_all(std::vector<v::command>(workers, trivial));  // warm up
    const auto start = std::chrono::steady_clock::now();
    const auto results = pool.run_all(commands);
    const double s = seconds_since(start);
    const auto ok = std::count_if(results.begin(), results.end(), [](const v::run_result& r) { return r.succeeded(); });
    std::printf("%-10s %8.1f runs/s (%lld of %zu succeeded)\n", configurations[k].name,
                static_cast<double>(commands.size()) / s, static_cast<long long>(ok), commands.size());
    if (ok != static_cast<long long>(commands.size())) return 1;
  }
  return 0;
}
