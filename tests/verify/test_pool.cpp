// Many verifications in parallel: results in order, bounded workers, errors rethrown.

#include <algorithm>
#include <atomic>
#include <sstream>
#include <utility>

#include "verify/support.hpp"

namespace {
using namespace verify_test;

// The most runs whose [start, end] intervals overlap at one instant (ends before starts
// at equal times, so touching intervals do not count as concurrent).
int most_at_once(std::vector<std::pair<long long, long long>> intervals) {
  std::vector<std::pair<long long, int>> events;
  for (const auto& [start, end] : intervals) {
    events.emplace_back(start, +1);
    events.emplace_back(end, -1);
  }
  std::sort(events.begin(), events.end());
  int now = 0, most = 0;
  for (const auto& [time, change] : events) most = std::max(most, now += change);
  return most;
}

TEST(VerifyPool, RunsManyCommandsInOrderOnBoundedWorkers) {
  // Each program prints its start and end on the wall clock (shared with the host: no
  // time namespace), its result, and exits with a code of its own. Concurrency is read
  // from those intervals rather than from the pool's total time, which a loaded or
  // instrumented machine stretches.
  constexpr int runs = 12;
  constexpr int workers = 4;
  std::vector<v::command> commands;
  for (int i = 0; i < runs; ++i)
    commands.push_back({.argv = {"sh", "-c",
                                 "date +%s%N; sleep 0.2; date +%s%N; echo $((" + std::to_string(i) +
                                     " * 2)); exit " + std::to_string(i % 3)}});
  const v::verify_pool pool(test_sandbox(), workers, 4ull << 30);
  const auto results = pool.run_all(commands);
  ASSERT_EQ(results.size(), commands.size());
  std::vector<std::pair<long long, long long>> intervals;
  for (int i = 0; i < runs; ++i) {
    std::istringstream lines(results[i].stdout_text);
    long long start = 0, end = 0;
    std::string value;
    ASSERT_TRUE(lines >> start >> end >> value) << i << ": " << results[i].stdout_text << results[i].stderr_text;
    EXPECT_LE(start, end) << i;
    EXPECT_EQ(value, std::to_string(2 * i)) << i;  // results come back in the commands' order
    EXPECT_EQ(results[i].exit_code, i % 3) << i;
    intervals.emplace_back(start, end);
  }
  const int most = most_at_once(intervals);
  std::printf("%d runs of 200 ms on %d workers: at most %d at once\n", runs, workers, most);
  EXPECT_LE(most, workers);  // bounded
  EXPECT_GE(most, 2);        // parallel: 12 sleeps of 200 ms on 4 workers cannot all miss each other
}

TEST(VerifyPool, OneHostileRunDoesNotDisturbTheOthers) {
  std::vector<v::command> commands(8, v::command{.argv = {"sh", "-c", "echo ok"}});
  commands[3] = {.argv = {"sleep", "30"}};
  auto limits = short_limits();
  limits.wall_time = 700ms;
  const auto results = v::verify_pool(test_sandbox(limits), 3, 3ull << 30).run_all(commands);
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (i == 3) {
      EXPECT_EQ(results[i].reason, v::termination::wall_time_limit);
    } else {
      EXPECT_TRUE(results[i].succeeded()) << i;
      EXPECT_EQ(results[i].stdout_text, "ok\n");
    }
  }
}

TEST(VerifyPool, BoundsConcurrentRunsAcrossThreads) {
  // Four threads, at most two programs at once: each program holds a lock file for
  // 100 ms; the total time shows the bound.
  v::sandbox_options options{.limits = short_limits(), .on_missing_isolation = v::missing_isolation::warn,
                             .max_concurrent_runs = 2};
  const v::sandbox box(options);
  std::vector<v::command> commands(8, v::command{.argv = {"sleep", "0.1"}});
  const auto start = std::chrono::steady_clock::now();
  (void)v::verify_pool(box, 4, 4ull << 30).run_all(commands);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(seconds, 0.39);  // 8 runs, 2 at a time, 100 ms each
}

TEST(VerifyPool, RefusesZeroWorkersAndRethrowsSetupErrors) {
  EXPECT_THROW(v::verify_pool(test_sandbox(), 0, 1ull << 30), cascade_rl::error);
  std::vector<v::command> commands = {{.argv = {"true"}}, {.argv = {}}};
  try {
    (void)v::verify_pool(test_sandbox(), 2, 2ull << 30).run_all(commands);
    FAIL() << "no error";
  } catch (const cascade_rl::error& e) {
    EXPECT_NE(std::string(e.what()).find("command.argv"), std::string::npos);
  }
}

TEST(VerifyPool, RefusesWorkersWhoseMemoryCapsDoNotFitItsMemory) {
  auto limits = short_limits();
  limits.memory_bytes = 512ull << 20;
  EXPECT_NO_THROW(v::verify_pool(test_sandbox(limits), 4, 2ull << 30));  // 4 x 512 MiB = 2 GiB
  try {
    (void)v::verify_pool(test_sandbox(limits), 5, 2ull << 30);
    FAIL() << "no error";
  } catch (const cascade_rl::error& e) {
    EXPECT_NE(std::string(e.what()).find("memory_bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("5 runs at once"), std::string::npos) << e.what();
  }
  EXPECT_THROW(v::verify_pool(test_sandbox(limits), 1, 256ull << 20), cascade_rl::error);
  // A sandbox that runs at most two programs at once needs room for two.
  v::sandbox_options bounded = test_options(limits);
  bounded.max_concurrent_runs = 2;
  EXPECT_NO_THROW(v::verify_pool(v::sandbox(bounded), 8, 1ull << 30));
}

TEST(VerifyPool, RunsCommandsWithLargerCapsOnlyAsItsMemoryAllows) {
  auto limits = short_limits();
  limits.memory_bytes = 256ull << 20;
  const v::verify_pool pool(test_sandbox(limits), 4, 1ull << 30);
  // Four commands that each ask for the whole gigabyte: one at a time.
  auto big = limits;
  big.memory_bytes = 1ull << 30;
  std::vector<v::command> commands(4, v::command{.argv = {"sleep", "0.2"}, .limits = big});
  const auto start = std::chrono::steady_clock::now();
  const auto results = pool.run_all(commands);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("4 runs of 200 ms at the pool's whole memory: %.3f s\n", seconds);
  for (const auto& r : results) EXPECT_TRUE(r.succeeded()) << r.stderr_text;
  EXPECT_GE(seconds, 0.79);
  // One that asks for more than the pool has is refused before anything runs.
  big.memory_bytes = 2ull << 30;
  commands[2].limits = big;
  try {
    (void)pool.run_all(commands);
    FAIL() << "no error";
  } catch (const cascade_rl::error& e) {
    EXPECT_NE(std::string(e.what()).find("commands[2]"), std::string::npos) << e.what();
  }
}

}  // namespace
