// exec::par with 1, 2 and 7 threads gives the same bits as exec::seq for every
// advantage, statistic and filter, on a batch large enough to span many reduction
// blocks (detail::reduce_block_size = 4096 tokens) and many parallel groups.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/distillation_advantages.hpp"
#include "cascade_rl/algorithms/gae_advantages.hpp"
#include "cascade_rl/algorithms/gdpo_advantages.hpp"
#include "cascade_rl/algorithms/gpg_advantages.hpp"
#include "cascade_rl/algorithms/group_filters.hpp"
#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/grpo_passk_advantages.hpp"
#include "cascade_rl/algorithms/length_filters.hpp"
#include "cascade_rl/algorithms/opo_advantages.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/algorithms/remax_advantages.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/presets/verl_advantages.hpp"

namespace {
namespace advantage_executors_cases {  // this file's names, apart in the area's unity build

using cascade_rl::group_layout;
using cascade_rl::token_layout;
namespace exec = cascade_rl::exec;

struct batch {
  static constexpr std::size_t groups = 4200;
  static constexpr std::size_t group_size = 16;
  std::vector<float> rewards;
  std::vector<std::int64_t> offsets{0};
  std::vector<std::uint8_t> mask;
  std::vector<std::int64_t> lengths;
  std::vector<float> teacher, student;

  batch() {
    std::mt19937_64 rng(12345);
    std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
    std::uniform_int_distribution<int> length(1, 24);
    std::bernoulli_distribution keep(0.85);
    for (std::size_t g = 0; g < groups; ++g) {
      const int kind = static_cast<int>(g % 3);  // binary, continuous, constant
      for (std::size_t i = 0; i < group_size; ++i)
        rewards.push_back(kind == 0 ? static_cast<float>(rng() % 2)
                          : kind == 1 ? uniform(rng)
                                      : 0.5f);
    }
    for (std::size_t s = 0; s < rewards.size(); ++s) {
      const int n = length(rng);
      lengths.push_back(n);
      offsets.push_back(offsets.back() + n);
      mask.push_back(1);  // every sequence keeps its first token
      for (int t = 1; t < n; ++t) mask.push_back(keep(rng) ? 1 : 0);
    }
    for (std::size_t t = 0; t < mask.size(); ++t) {
      teacher.push_back(-std::abs(uniform(rng)));
      student.push_back(-std::abs(uniform(rng)));
    }
  }
  [[nodiscard]] token_layout tokens() const { return token_layout(offsets, mask); }
  [[nodiscard]] group_layout group() const {
    return group_layout::uniform({.groups = groups, .size = group_size});
  }
};

const batch& data() {
  static const batch b;
  return b;
}

// Everything the algorithms produce, as raw bytes, keyed by name.
struct outputs {
  std::vector<std::pair<std::string, std::vector<unsigned char>>> items;

  template <class V>
  void add(const std::string& name, const std::vector<V>& v) {
    std::vector<unsigned char> bytes(v.size() * sizeof(V));
    if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
    items.emplace_back(name, std::move(bytes));
  }
};

template <class Policy>
outputs run_all(const Policy& policy) {
  const batch& b = data();
  const auto tokens = b.tokens();
  const auto groups = b.group();
  const std::span<const float> rewards(b.rewards);
  const std::size_t n = b.rewards.size();
  const std::size_t t = b.mask.size();
  outputs out;

  std::vector<cascade_rl::group_statistic> stats(batch::groups);
  cascade_rl::group_statistics(policy, groups, rewards,
                               std::span<cascade_rl::group_statistic>(stats));
  std::vector<double> fields;  // field by field: the struct's padding bytes are unspecified
  for (const auto& g : stats)
    fields.insert(fields.end(), {g.mean, g.std, g.min, g.max, static_cast<double>(g.count),
                                 g.zero_variance ? 1.0 : 0.0});
  out.add("group_statistics", fields);

  std::vector<float> loo_mean(n), loo_std(n);
  cascade_rl::leave_one_out_statistics(policy, groups, rewards, loo_mean, loo_std);
  out.add("loo_mean", loo_mean);
  out.add("loo_std", loo_std);

  std::vector<float> a(n);
  cascade_rl::grpo_advantages(policy, groups, rewards, a);
  out.add("grpo", a);
  cascade_rl::grpo_advantages(policy, groups, rewards, a, cascade_rl::presets::verl::grpo());
  out.add("grpo_verl", a);
  cascade_rl::rloo_advantages(policy, groups, rewards, a);
  out.add("rloo", a);
  cascade_rl::gpg_advantages(policy, groups, rewards, a);
  out.add("gpg", a);
  cascade_rl::gpg_advantages(policy, groups, rewards, a, cascade_rl::presets::verl::gpg(2.0));
  out.add("gpg_verl", a);
  cascade_rl::grpo_passk_advantages(policy, groups, rewards, a);
  out.add("grpo_passk", a);

  std::vector<float> on_tokens(t), placed(t), adv(t);
  cascade_rl::broadcast_to_tokens(policy, tokens, a, on_tokens);
  out.add("broadcast", on_tokens);
  cascade_rl::place_on_last_valid_token(policy, tokens, rewards, placed);
  out.add("place_on_last_valid_token", placed);
  cascade_rl::reinforce_plus_plus_advantages(policy, tokens, placed, adv, {.gamma = 0.9});
  out.add("reinforce_plus_plus", adv);
  cascade_rl::reinforce_plus_plus_baseline_advantages(policy, groups, tokens, rewards, adv);
  out.add("reinforce_plus_plus_baseline", adv);
  cascade_rl::masked_whiten(policy, tokens, b.teacher, adv);
  out.add("masked_whiten", adv);
  cascade_rl::distillation_advantages(
      policy, tokens, {.teacher_log_probs = b.teacher, .student_log_probs = b.student}, adv);
  out.add("distillation", adv);
  std::vector<float> returns(t);
  cascade_rl::gae_advantages(policy, tokens, {.token_rewards = placed, .values = b.teacher}, adv,
                             returns, {.gamma = 0.99, .lambda = 0.95});
  out.add("gae", adv);
  out.add("gae.returns", returns);
  cascade_rl::remax_advantages(
      policy, tokens, {.token_rewards = b.teacher, .reward_baselines = rewards}, adv, returns);
  out.add("remax", adv);
  out.add("remax.returns", returns);
  cascade_rl::opo_advantages(policy, groups, tokens, rewards, adv);
  out.add("opo", adv);
  std::vector<float> components(b.rewards);
  for (const float r : b.rewards) components.push_back(1.0f - r);
  const std::vector<double> weights{0.5, 1.0};
  cascade_rl::gdpo_advantages(policy, groups, tokens,
                              {.component_scores = components, .weights = weights}, adv,
                              cascade_rl::presets::verl::gdpo());
  out.add("gdpo", adv);

  const auto selection = cascade_rl::drop_zero_variance_groups(policy, groups, rewards);
  out.add("selection.kept_sequences", selection.kept_sequences);
  out.add("selection.group_offsets", selection.group_offsets);
  std::vector<float> gathered(selection.kept_sequences.size());
  cascade_rl::gather_sequences(policy, selection, rewards, gathered);
  out.add("gathered", gathered);

  const cascade_rl::overlong_options overlong{.max_length = 20, .buffer_length = 6};
  std::vector<std::uint8_t> flags(n);
  const std::size_t count = cascade_rl::overlong_sequences(
      policy, std::span<const std::int64_t>(b.lengths), std::span<const std::uint8_t>(),
      std::span<std::uint8_t>(flags), overlong);
  out.add("overlong_flags", flags);
  out.add("overlong_count", std::vector<std::size_t>{count});
  std::vector<float> shaped = b.rewards;
  cascade_rl::add_soft_overlong_penalty(policy, std::span<const std::int64_t>(b.lengths),
                                        std::span<const std::uint8_t>(), std::span<float>(shaped),
                                        overlong);
  out.add("soft_overlong_penalty", shaped);
  return out;
}

TEST(AdvantageExecutors, BatchSpansManyBlocksAndGroups) {
  EXPECT_GT(data().mask.size(), 20 * cascade_rl::detail::reduce_block_size);
  EXPECT_GT(batch::groups, cascade_rl::detail::group_parallel_threshold);
  EXPECT_GT(data().rewards.size(), cascade_rl::detail::parallel_threshold);
  // GRPO's group tiles go parallel too.
  EXPECT_GE(batch::groups / cascade_rl::detail::uniform_group_tile,
            cascade_rl::detail::uniform_tile_parallel_tiles(batch::group_size));
}

TEST(AdvantageExecutors, ParallelEqualsSequentialBitForBit) {
  const outputs reference = run_all(exec::seq);
  for (int threads : {1, 2, 7}) {
    const outputs parallel = run_all(exec::par.with_threads(threads));
    ASSERT_EQ(parallel.items.size(), reference.items.size());
    for (std::size_t k = 0; k < reference.items.size(); ++k)
      EXPECT_TRUE(parallel.items[k].second == reference.items[k].second)
          << reference.items[k].first << " differs with " << threads << " threads";
  }
}

TEST(AdvantageExecutors, RepeatedParallelRunsAgree) {
  const outputs first = run_all(exec::par.with_threads(7));
  const outputs second = run_all(exec::par.with_threads(7));
  for (std::size_t k = 0; k < first.items.size(); ++k)
    EXPECT_TRUE(first.items[k].second == second.items[k].second) << first.items[k].first;
}

}  // namespace advantage_executors_cases
}  // namespace
