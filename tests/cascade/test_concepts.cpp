// The plug-in points as concepts: the test types satisfy them, and a type lacking one
// member does not. What g++ 12 prints when such a type reaches run_cascade:
//   error: no matching function for call to 'run_cascade(...)'
//   note: constraints not satisfied
//   concepts.hpp: required for the satisfaction of 'applies_gradient<P>' [with P = no_gradient]
//   concepts.hpp: required for the satisfaction of 'Policy<P>' [with P = no_gradient]
//   note: the required expression 'p.apply_gradient(batch, dlogp, lr)' is invalid

#include <gtest/gtest.h>

#include <span>

#include "cascade_rl/cascade.hpp"
#include "support/test_cascade.hpp"
#include "support/test_policy.hpp"

namespace {

namespace cr = cascade_rl;
using cr::testing::tabular_policy;
using cr::testing::tabular_snapshot;

// A minimal policy, then copies each missing one member.
struct minimal {
  using snapshot_type = int;
  cr::rollout_batch generate(std::span<const cr::prompt>, const cr::generation_request&) { return {}; }
  void log_probs(const cr::rollout_batch&, std::span<float>) const {}
  void apply_gradient(const cr::rollout_batch&, std::span<const float>, double) {}
  int snapshot() const { return 0; }
  void restore(int) {}
};
struct no_generate {
  using snapshot_type = int;
  void log_probs(const cr::rollout_batch&, std::span<float>) const {}
  void apply_gradient(const cr::rollout_batch&, std::span<const float>, double) {}
  int snapshot() const { return 0; }
  void restore(int) {}
};
struct no_gradient {
  using snapshot_type = int;
  cr::rollout_batch generate(std::span<const cr::prompt>, const cr::generation_request&) { return {}; }
  void log_probs(const cr::rollout_batch&, std::span<float>) const {}
  int snapshot() const { return 0; }
  void restore(int) {}
};
struct mutable_scoring {  // log_probs must be const (teachers score through const refs)
  using snapshot_type = int;
  cr::rollout_batch generate(std::span<const cr::prompt>, const cr::generation_request&) { return {}; }
  void log_probs(const cr::rollout_batch&, std::span<float>) {}
  void apply_gradient(const cr::rollout_batch&, std::span<const float>, double) {}
  int snapshot() const { return 0; }
  void restore(int) {}
};
struct no_snapshot_type {
  cr::rollout_batch generate(std::span<const cr::prompt>, const cr::generation_request&) { return {}; }
  void log_probs(const cr::rollout_batch&, std::span<float>) const {}
  void apply_gradient(const cr::rollout_batch&, std::span<const float>, double) {}
};
struct wrong_generate_result {
  using snapshot_type = int;
  int generate(std::span<const cr::prompt>, const cr::generation_request&) { return 0; }
  void log_probs(const cr::rollout_batch&, std::span<float>) const {}
  void apply_gradient(const cr::rollout_batch&, std::span<const float>, double) {}
  int snapshot() const { return 0; }
  void restore(int) {}
};

static_assert(cr::Policy<minimal>);
static_assert(cr::Policy<tabular_policy>);
static_assert(!cr::Policy<no_generate> && !cr::generates_rollouts<no_generate>);
static_assert(!cr::Policy<no_gradient> && !cr::applies_gradient<no_gradient>);
static_assert(!cr::Policy<mutable_scoring> && !cr::scores_tokens<mutable_scoring>);
static_assert(!cr::Policy<no_snapshot_type> && !cr::takes_snapshots<no_snapshot_type>);
static_assert(!cr::Policy<wrong_generate_result>);

static_assert(cr::Checkpointable<tabular_policy>);
static_assert(!cr::Checkpointable<minimal>);
static_assert(cr::Teacher<tabular_snapshot>);
static_assert(!cr::Teacher<int>);

// Rewards: a per-response callable (a lambda too), or score_batch.
static_assert(cr::Reward<cr::testing::exact_answer_reward>);
static_assert(cr::per_response_reward<decltype([](const cr::response_view&) { return 1.0f; })>);
static_assert(!cr::Reward<decltype([](int) { return 1.0f; })>);
static_assert(!cr::Reward<decltype([](const cr::response_view&) { return "x"; })>);

// Estimators.
static_assert(cr::AdvantageEstimator<cr::grpo_estimator>);
static_assert(cr::AdvantageEstimator<cr::dr_grpo_estimator>);
static_assert(cr::AdvantageEstimator<cr::rloo_estimator>);
static_assert(!cr::AdvantageEstimator<cr::testing::exact_answer_reward>);

// Sources and stages.
static_assert(cr::PromptSource<cr::prompt_pool>);
using grpo_t = cr::grpo_stage<cr::prompt_pool, cr::testing::exact_answer_reward>;
using mopd_t = cr::mopd_stage<cr::prompt_pool>;
static_assert(cr::Stage<grpo_t, tabular_policy>);
static_assert(cr::Stage<mopd_t, tabular_policy>);
static_assert(cr::needs_teachers<mopd_t> && !cr::needs_teachers<grpo_t>);
static_assert(!cr::Stage<int, tabular_policy>);

// The runner accepts a cascade only with a Policy.
template <class P>
concept runnable = requires(decltype(cr::testing::make_test_cascade())& c, P& p) { cr::run_cascade(c, p, {}); };
static_assert(runnable<tabular_policy>);
static_assert(!runnable<no_gradient>);

// A custom stage (not a ready-made one) runs in a cascade next to the others.
struct counting_stage {
  cr::stage_config cfg{.name = "counter", .steps = 3};
  int steps_taken = 0;
  const cr::stage_config& config() const { return cfg; }
  void validate() const {}
  nlohmann::json state() const { return {{"taken", steps_taken}}; }
  void load_state(const nlohmann::json& j) { steps_taken = j.at("taken"); }
  cr::step_metrics step(tabular_policy&, cr::step_context<tabular_snapshot>&) {
    ++steps_taken;
    return {};
  }
  std::vector<cr::domain_score> evaluate(tabular_policy&, std::uint64_t) { return {}; }
};
static_assert(cr::Stage<counting_stage, tabular_policy>);

TEST(Concepts, CustomStageRunsInACascade) {
  auto cascade = cr::make_cascade(counting_stage{});
  tabular_policy policy;
  const auto report = cr::run_cascade(cascade, policy, {});
  EXPECT_TRUE(report.finished);
  EXPECT_EQ(cascade.get<0>().steps_taken, 3);
  EXPECT_EQ(report.forgetting.rows(), 2u);
}

}  // namespace
