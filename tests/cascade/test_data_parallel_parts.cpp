// The single-process pieces of the data-parallel cascade (data_parallel.hpp): the
// type-erased communicator (comm/communicator_ref.hpp), prompt sharding, per-prompt
// seeds, exact sums, and the runner over an explicit communicator. The multi-process
// runs are tests/comm/mpi_cascade.cpp (1, 2 and 4 ranks against one process, bit for
// bit).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <vector>

#include "cascade_rl/cascade.hpp"
#include "cascade_rl/cascade/data_parallel.hpp"
#include "cascade_rl/comm/communicator_ref.hpp"
#include "support/expect_error.hpp"
#include "support/test_cascade.hpp"
#include "support/test_policy.hpp"

namespace {

namespace cr = cascade_rl;
using cr::testing::tabular_policy;
using cr::testing::tabular_snapshot;

// A communicator that claims `ranks` ranks and records what it is asked; collectives
// act as if every rank held this rank's values.
struct recording_communicator {
  int ranks = 1;
  int reduces = 0, gathers = 0, broadcasts = 0, barriers = 0;
  [[nodiscard]] int rank() const { return 0; }
  [[nodiscard]] int size() const { return ranks; }
  template <cr::reducible_value T>
  void all_reduce(std::span<T> values, cr::reduce_op op) {
    ++reduces;
    if (op == cr::reduce_op::sum)
      for (T& v : values) v = static_cast<T>(v * static_cast<T>(ranks));
  }
  template <cr::transferable_value T>
  void all_gather(std::span<const T> mine, std::span<T> all) {
    ++gathers;
    for (std::size_t r = 0; r < static_cast<std::size_t>(ranks); ++r)
      std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(r * mine.size()));
  }
  template <cr::transferable_value T>
  void broadcast(std::span<T>, int) { ++broadcasts; }
  void barrier() { ++barriers; }
};
static_assert(cr::Communicator<recording_communicator>);
static_assert(cr::Communicator<cr::communicator_ref>);

TEST(DataParallel, CommunicatorRefDefaultsToOneProcess) {
  cr::communicator_ref comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  std::vector<double> values{1.5, 2.5};
  comm.all_reduce(std::span<double>(values), cr::reduce_op::sum);
  EXPECT_EQ(values, (std::vector<double>{1.5, 2.5}));
  EXPECT_EQ(cr::sum_in_rank_order(comm, 0.1), 0.1);
}

TEST(DataParallel, CommunicatorRefForwardsEveryCollective) {
  recording_communicator inner{.ranks = 3};
  cr::communicator_ref comm(inner);
  cr::communicator_ref copy = comm;  // copies the reference
  EXPECT_EQ(copy.size(), 3);
  std::vector<std::uint64_t> counts{2, 5};
  copy.all_reduce(std::span<std::uint64_t>(counts), cr::reduce_op::sum);
  EXPECT_EQ(counts, (std::vector<std::uint64_t>{6, 15}));
  const std::vector<float> mine{1.0f, 2.0f};
  std::vector<float> all(6);
  copy.all_gather(std::span<const float>(mine), std::span<float>(all));
  EXPECT_EQ(all, (std::vector<float>{1, 2, 1, 2, 1, 2}));
  std::vector<std::byte> bytes(4);
  copy.broadcast(std::span<std::byte>(bytes), 0);
  copy.barrier();
  EXPECT_EQ(inner.reduces, 1);
  EXPECT_EQ(inner.gathers, 1);
  EXPECT_EQ(inner.broadcasts, 1);
  EXPECT_EQ(inner.barriers, 1);
  EXPECT_DOUBLE_EQ(cr::sum_in_rank_order(comm, 0.5), 1.5);
}

TEST(DataParallel, ShardsAreContiguousBalancedAndCoverEveryPrompt) {
  for (std::size_t n : {0u, 1u, 3u, 5u, 7u, 128u})
    for (int size : {1, 2, 3, 4, 8}) {
      std::size_t next = 0, smallest = n, largest = 0;
      for (int r = 0; r < size; ++r) {
        const cr::shard_range s = cr::shard_of(n, r, size);
        EXPECT_EQ(s.begin, next) << n << " over " << size;
        next = s.end;
        smallest = std::min(smallest, s.size());
        largest = std::max(largest, s.size());
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(largest - smallest, 1u);
    }
}

TEST(DataParallel, PromptSeedDependsOnThePromptsPositionInTheStep) {
  const cr::generation_request whole{.group_size = 4, .seed = 99};
  const cr::generation_request shard{.group_size = 4, .seed = 99, .first_prompt = 3};
  EXPECT_EQ(cr::prompt_seed(whole, 5), cr::prompt_seed(shard, 2));
  std::set<std::uint64_t> seeds;
  for (std::size_t j = 0; j < 64; ++j) seeds.insert(cr::prompt_seed(whole, j));
  EXPECT_EQ(seeds.size(), 64u);
  const cr::generation_request other{.group_size = 4, .seed = 100};
  EXPECT_NE(cr::prompt_seed(whole, 0), cr::prompt_seed(other, 0));
}

TEST(DataParallel, ExactSumDoesNotDependOnOrder) {
  std::vector<double> values;
  cr::rng_type rng(5);
  for (int i = 0; i < 1000; ++i) values.push_back((cr::detail::uniform01(rng) - 0.5) * std::pow(10.0, i % 7 - 3));
  cr::exact_sum forward(1), backward(1), halves(1);
  for (double v : values) forward.add(0, v);
  for (auto it = values.rbegin(); it != values.rend(); ++it) backward.add(0, *it);
  for (std::size_t i = 0; i < values.size(); i += 2) halves.add(0, values[i]);
  for (std::size_t i = 1; i < values.size(); i += 2) halves.add(0, values[i]);
  EXPECT_EQ(forward[0], backward[0]);
  EXPECT_EQ(forward[0], halves[0]);
  double plain = 0;
  for (double v : values) plain += v;
  EXPECT_NEAR(forward[0], plain, 1e-6);
  cr::communicator_ref one;
  forward.all_reduce(one);
  EXPECT_EQ(forward[0], backward[0]);
}

TEST(DataParallel, ExactSumRefusesWhatItCannotHold) {
  cr::exact_sum sum(3);
  cr::testing::expect_error_naming([&] { sum.add(1, std::numeric_limits<double>::quiet_NaN()); },
                                   "exact_sum value[1]", "not finite");
  cr::testing::expect_error_naming([&] { sum.add(2, 1e12); }, "exact_sum value[2]", "out of range");
  cr::testing::expect_error_naming([] { cr::exact_sum bad(1, 61); }, "fraction_bits");
}

// The runner over an explicit one-process communicator is the default runner.
TEST(DataParallel, RunnerOverALocalCommunicatorEqualsTheDefault) {
  auto cascade_a = cr::testing::make_test_cascade(4, 6, 5);
  auto cascade_b = cr::testing::make_test_cascade(4, 6, 5);
  tabular_policy a, b;
  cr::local_communicator local;
  const cr::cascade_report x = cr::make_runner(cascade_a, a, {.seed = 5}).run();
  auto runner = cr::make_runner(cascade_b, b, local, {.seed = 5});
  EXPECT_EQ(runner.communicator().size(), 1);
  const cr::cascade_report y = runner.run();
  EXPECT_EQ(x.forgetting.to_json().dump(), y.forgetting.to_json().dump());
  EXPECT_TRUE(a.snapshot() == b.snapshot());
}

// A custom stage that does not declare data_parallel would run its whole step on every
// rank: the runner refuses it on more than one rank, and runs it on one.
struct plain_stage {
  cr::stage_config cfg{.name = "plain", .steps = 1};
  const cr::stage_config& config() const { return cfg; }
  void validate() const {}
  nlohmann::json state() const { return nlohmann::json::object(); }
  void load_state(const nlohmann::json&) {}
  cr::step_metrics step(tabular_policy&, cr::step_context<tabular_snapshot>& context) {
    seen_ranks = context.comm.size();
    return {};
  }
  std::vector<cr::domain_score> evaluate(tabular_policy&, std::uint64_t) { return {}; }
  int seen_ranks = 0;
};
static_assert(!cr::data_parallel_stage<plain_stage>);
static_assert(cr::data_parallel_stage<std::decay_t<decltype(cr::testing::make_test_cascade().get<0>())>>);

TEST(DataParallel, StagesWithoutDataParallelSupportAreRefusedOnSeveralRanks) {
  auto cascade = cr::make_cascade(plain_stage{});
  tabular_policy policy;
  recording_communicator two{.ranks = 2};
  auto runner = cr::make_runner(cascade, policy, two, {});
  cr::testing::expect_error_naming([&] { (void)runner.run(); }, "stage 'plain'", "data_parallel", "2 ranks");
  EXPECT_EQ(two.reduces + two.gathers + two.broadcasts, 0);  // refused before any collective

  recording_communicator one{.ranks = 1};
  auto single = cr::make_runner(cascade, policy, one, {});
  EXPECT_TRUE(single.run().finished);
  EXPECT_EQ(cascade.get<0>().seen_ranks, 1);
}

}  // namespace
