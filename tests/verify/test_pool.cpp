// Many verifications in parallel: results in order, bounded workers, errors rethrown.

#include <atomic>

#include "verify/support.hpp"

namespace {
using namespace verify_test;

TEST(VerifyPool, RunsManyCommandsInOrderOnBoundedWorkers) {
  std::vector<v::command> commands;
  for (int i = 0; i < 24; ++i)
    commands.push_back({.argv = {"sh", "-c", "sleep 0.05; echo $((" + std::to_string(i) + " * 2)); exit " + std::to_string(i % 3)}});
  const v::verify_pool pool(test_sandbox(), 4);
  const auto start = std::chrono::steady_clock::now();
  const auto results = pool.run_all(commands);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("24 runs of 50 ms on 4 workers: %.3f s\n", seconds);
  ASSERT_EQ(results.size(), commands.size());
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(results[i].stdout_text, std::to_string(2 * i) + "\n");
    EXPECT_EQ(results[i].exit_code, i % 3);
  }
  EXPECT_LT(seconds, 24 * 0.05);  // parallel
}

TEST(VerifyPool, OneHostileRunDoesNotDisturbTheOthers) {
  std::vector<v::command> commands(8, v::command{.argv = {"sh", "-c", "echo ok"}});
  commands[3] = {.argv = {"sleep", "30"}};
  auto limits = short_limits();
  limits.wall_time = 700ms;
  const auto results = v::verify_pool(test_sandbox(limits), 3).run_all(commands);
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
  (void)v::verify_pool(box, 4).run_all(commands);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(seconds, 0.39);  // 8 runs, 2 at a time, 100 ms each
}

TEST(VerifyPool, RefusesZeroWorkersAndRethrowsSetupErrors) {
  EXPECT_THROW(v::verify_pool(test_sandbox(), 0), cascade_rl::error);
  std::vector<v::command> commands = {{.argv = {"true"}}, {.argv = {}}};
  try {
    (void)v::verify_pool(test_sandbox(), 2).run_all(commands);
    FAIL() << "no error";
  } catch (const cascade_rl::error& e) {
    EXPECT_NE(std::string(e.what()).find("command.argv"), std::string::npos);
  }
}

}  // namespace
