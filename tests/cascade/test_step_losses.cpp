// The engine's step losses (cascade/step_losses.hpp), which this build compiles once
// (src/step_losses.cpp): the list compiled once holds the loss of every update rule, and
// the shared instances give the bits of the header's own policy_loss, instantiated here.

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "cascade_rl/cascade.hpp"
#include "support/random_batch.hpp"

namespace {
namespace step_losses_cases {

namespace cr = cascade_rl;

#define CASCADE_RL_TEST_LISTED(Options) cr::Options,
using listed_options = std::tuple<CASCADE_RL_STEP_LOSS_OPTIONS(CASCADE_RL_TEST_LISTED) void>;
#undef CASCADE_RL_TEST_LISTED

template <class T, class Tuple>
struct listed;
template <class T, class... Ts>
struct listed<T, std::tuple<Ts...>> : std::bool_constant<(std::is_same_v<T, Ts> || ...)> {};

// The options a rule's loss is called with; bypass mode's are its own two instances.
template <class Rule>
using rule_options_t = decltype(std::declval<const Rule&>().loss_options(cr::loss_aggregation::token_mean));

template <class Rule>
constexpr bool compiled_once =
    listed<rule_options_t<Rule>, listed_options>::value || std::is_same_v<rule_options_t<Rule>, cr::bypass_mode_options>;

TEST(StepLosses, EveryUpdateRulesLossIsInTheListCompiledOnce) {
  std::size_t rules = 0, compiled = 0;
  const auto count = [&]<class... Rules>(const std::variant<Rules...>&) {
    ((++rules, compiled += compiled_once<Rules> ? 1 : 0), ...);
  };
  count(cr::update_options{}.rule);
  EXPECT_EQ(compiled, rules) << "a rule's loss options are missing from CASCADE_RL_STEP_LOSS_OPTIONS";
  EXPECT_GE(rules, 11u);
  EXPECT_TRUE((listed<cr::reinforce_options, listed_options>::value));  // MOPD's loss
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return false;
  return true;
}

// One loss through the engine's entry (compiled once in this build) and through
// policy_loss directly: the same loss, gradient and metrics, bit for bit.
template <class Options>
void expect_entry_gives_header_bits(const Options& options, const char* name) {
  const auto b = cr::testing::make_random_batch<float>(11, {.sequences = 40, .max_length = 60, .log_ratio_spread = 0.5});
  const cr::token_layout layout = b.layout();
  const cr::loss_normalizer normalizer =
      cr::local_loss_counts(cr::exec::seq, layout).normalizer(cr::loss_aggregation::token_mean, 60);
  const cr::policy_loss_inputs<float> inputs{.log_probs = b.log_probs,
                                             .old_log_probs = b.old_log_probs,
                                             .advantages = b.advantages,
                                             .behaviour_log_probs = b.behaviour_log_probs};
  std::vector<float> shared(b.tokens()), direct(b.tokens());
  const cr::policy_loss_result via_step =
      cr::detail::step_policy_loss(layout, inputs, std::span<float>(shared), normalizer, options);
  const cr::policy_loss_result via_header = cr::policy_loss(cr::exec::par, layout, inputs, direct, normalizer, options);
  EXPECT_EQ(std::bit_cast<std::uint64_t>(via_step.loss), std::bit_cast<std::uint64_t>(via_header.loss)) << name;
  EXPECT_TRUE(same_bits(shared, direct)) << name;
  EXPECT_EQ(via_step.metrics.valid_tokens, via_header.metrics.valid_tokens) << name;
  EXPECT_EQ(via_step.metrics.clipped, via_header.metrics.clipped) << name;
  EXPECT_NE(via_step.loss, 0.0) << name;
}

TEST(StepLosses, TheSharedInstancesGiveTheHeadersBits) {
  expect_entry_gives_header_bits(cr::reinforce_options{}, "reinforce");
  expect_entry_gives_header_bits(cr::ppo_clip_options{.clip_high = 0.28, .dual_clip = 2.0}, "ppo_clip");
  expect_entry_gives_header_bits(cr::cispo_options{.clip_high = 0.28}, "cispo");
}

}  // namespace step_losses_cases
}  // namespace
