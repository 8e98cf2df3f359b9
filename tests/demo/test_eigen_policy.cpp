// The demo's Eigen policy: the hand-written backward pass against finite differences
// (in double), sampling and behaviour log-probs, determinism, snapshots and files.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include <cascade_rl/cascade.hpp>

#include "eigen_policy.hpp"
#include "sft.hpp"
#include "tasks.hpp"

namespace {

namespace cr = cascade_rl;

const demo::lm_shape small{.vocab = demo::vocabulary_size(), .d = 8, .heads = 2, .ffn = 12,
                           .prompt_positions = 64, .response_positions = 16};

// L = sum_t g_t * log pi(y_t) over two responses to two prompts.
struct fixture {
  std::vector<std::int32_t> prompt_a = demo::encode("json b 5 d 2"), prompt_b = demo::encode("mcq A c B a ? a");
  std::vector<std::int32_t> reply_a = demo::encode("{ b : 5 }"), reply_b = demo::encode("B");
  std::vector<double> g_a = {0.7, -1.3, 0.4, 2.0, -0.5}, g_b = {1.1};

  double loss(const demo::lm_weights<double>& w) const {
    demo::lm_pass<double> p;
    double l = 0;
    w.forward(prompt_a, reply_a, p);
    for (std::size_t t = 0; t < g_a.size(); ++t) l += g_a[t] * p.log_probs[t];
    w.forward(prompt_b, reply_b, p);
    l += g_b[0] * p.log_probs[0];
    return l;
  }
  std::vector<double> gradient(const demo::lm_weights<double>& w) const {
    std::vector<double> grad(w.params.size(), 0.0);
    demo::lm_pass<double> p;
    w.forward(prompt_a, reply_a, p);
    w.backward(p, g_a, grad);
    w.forward(prompt_b, reply_b, p);
    w.backward(p, g_b, grad);
    return grad;
  }
};

TEST(DemoEigenPolicy, BackwardMatchesFiniteDifferencesInDouble) {
  fixture f;
  demo::lm_weights<double> w(small, 3);
  // Move the biases off zero so that every block is exercised.
  std::mt19937_64 rng(5);
  for (double& x : w.params) x += 0.05 * (static_cast<double>(rng() % 2001) / 1000.0 - 1.0);
  const std::vector<double> grad = f.gradient(w);
  const demo::lm_layout layout(small);
  const double h = 1e-6;
  double worst = 0;
  std::size_t checked = 0;
  for (int b = 0; b < demo::lm_layout::count; ++b) {
    // Every parameter of the small blocks, a stride through the large ones.
    const std::size_t size = layout.offset[b + 1] - layout.offset[b];
    const std::size_t stride = size > 200 ? 3 : 1;
    for (std::size_t i = layout.offset[b]; i < layout.offset[b + 1]; i += stride) {
      const double keep = w.params[i];
      w.params[i] = keep + h;
      const double up = f.loss(w);
      w.params[i] = keep - h;
      const double down = f.loss(w);
      w.params[i] = keep;
      const double numeric = (up - down) / (2 * h);
      const double error = std::abs(numeric - grad[i]) / std::max(1.0, std::abs(numeric));
      worst = std::max(worst, error);
      EXPECT_NEAR(grad[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << "block " << b << " index " << i;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000u);
  // Not vacuous: most parameters the two sequences touch have a gradient.
  EXPECT_GT(std::count_if(grad.begin(), grad.end(), [](double g) { return std::abs(g) > 1e-8; }), 1000);
  EXPECT_LT(worst, 1e-6);
}

TEST(DemoEigenPolicy, UnusedParametersGetNoGradient) {
  fixture f;
  demo::lm_weights<double> w(small, 3);
  const std::vector<double> grad = f.gradient(w);
  const demo::lm_layout layout(small);
  // A token that appears nowhere has zero embedding gradient.
  const std::int32_t unused = demo::token_id("wnz");
  for (int k = 0; k < small.d; ++k) EXPECT_EQ(grad[layout.offset[demo::lm_layout::E] + static_cast<std::size_t>(unused * small.d + k)], 0.0);
}

TEST(DemoEigenPolicy, BehaviourLogProbsMatchScoringAtTemperatureOne) {
  demo::eigen_policy policy(small, 4);
  const auto tasks = demo::make_tasks("structured_output", 6, 1);
  const auto prompts = demo::prompts_of(tasks);
  const cr::rollout_batch batch = policy.generate(prompts, {.group_size = 3, .sampling = {.max_response_length = 10}, .seed = 9});
  cr::validate_rollout_batch(batch, "test", prompts.size(), 3);
  std::vector<float> scored(batch.token_count());
  policy.log_probs(batch, scored);
  for (std::size_t t = 0; t < scored.size(); ++t) EXPECT_NEAR(scored[t], batch.behaviour_log_probs[t], 1e-4);
  for (std::size_t i = 0; i < batch.response_count(); ++i) {
    EXPECT_LE(batch.length(i), 10u);
    const bool stopped = batch.response_tokens(i).back() == demo::eos;
    EXPECT_EQ(batch.finish_reasons[i], stopped ? cr::finish_reason::stopped : cr::finish_reason::truncated);
  }
}

TEST(DemoEigenPolicy, GenerationIsDeterministicAndIndependentOfThreads) {
  const auto prompts = demo::prompts_of(demo::make_tasks("instruction_following", 11, 2));
  demo::eigen_policy one(small, 4, {}, 1), two(small, 4, {}, 2);
  const cr::generation_request request{.group_size = 4, .sampling = {.max_response_length = 8}, .seed = 77};
  const auto a = one.generate(prompts, request), b = two.generate(prompts, request), c = two.generate(prompts, request);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(b.tokens, c.tokens);
  EXPECT_EQ(a.behaviour_log_probs, b.behaviour_log_probs);
  const auto d = one.generate(prompts, {.group_size = 4, .sampling = {.max_response_length = 8}, .seed = 78});
  EXPECT_NE(a.tokens, d.tokens);
  // The gradient step too: the same bits on one thread or two.
  std::vector<float> dlogp(a.token_count(), 0.01f);
  one.apply_gradient(a, dlogp, 1e-2);
  two.apply_gradient(a, dlogp, 1e-2);
  EXPECT_EQ(one.snapshot(), two.snapshot());
}

TEST(DemoEigenPolicy, TopPAndGreedySampling) {
  demo::eigen_policy policy(small, 4);
  const auto prompts = demo::prompts_of(demo::make_tasks("chat", 4, 2));
  // top_p close to 0 keeps only the most likely token: the greedy choice.
  const auto greedy = policy.generate(prompts, {.group_size = 2, .sampling = {.temperature = 0.0, .max_response_length = 6}, .seed = 1});
  const auto narrow = policy.generate(prompts, {.group_size = 2, .sampling = {.temperature = 1.0, .top_p = 1e-6, .max_response_length = 6}, .seed = 5});
  EXPECT_EQ(greedy.tokens, narrow.tokens);
  for (float lp : narrow.behaviour_log_probs) EXPECT_NEAR(lp, 0.0f, 1e-6);  // the sampler's own probability: 1
}

TEST(DemoEigenPolicy, SftLowersTheLossAndSnapshotsRestoreExactly) {
  demo::eigen_policy policy(small, 4);
  const auto tasks = demo::make_tasks("tool_calling", 64, 3);
  std::vector<const demo::task*> all;
  for (const auto& t : tasks) all.push_back(&t);
  const cr::rollout_batch batch = demo::demonstration_batch(all);
  const double before = demo::demonstration_nll(policy, batch);
  const auto saved = policy.snapshot();
  std::mt19937_64 rng(1);
  for (int s = 0; s < 60; ++s) demo::sft_step(policy, tasks, 32, 1e-2, rng);
  const double after = demo::demonstration_nll(policy, batch);
  EXPECT_LT(after, 0.5 * before);
  // A snapshot scores like the policy it came from (it is what MOPD teachers are).
  std::vector<float> from_policy(batch.token_count()), from_snapshot(batch.token_count());
  policy.log_probs(batch, from_policy);
  policy.snapshot().log_probs(batch, from_snapshot);
  EXPECT_EQ(from_policy, from_snapshot);
  policy.restore(saved);
  EXPECT_DOUBLE_EQ(demo::demonstration_nll(policy, batch), before);
}

TEST(DemoEigenPolicy, SaveAndLoadRoundTrip) {
  demo::eigen_policy policy(small, 4);
  std::vector<float> dlogp;
  const auto prompts = demo::prompts_of(demo::make_tasks("code", 3, 2));
  const auto batch = policy.generate(prompts, {.group_size = 2, .sampling = {.max_response_length = 6}, .seed = 1});
  dlogp.assign(batch.token_count(), -0.1f);
  policy.apply_gradient(batch, dlogp, 1e-2);  // non-trivial Adam state
  const auto path = std::filesystem::temp_directory_path() / "cascade_demo_policy_test.bin";
  policy.save(policy.snapshot(), path);
  EXPECT_EQ(policy.load(path), policy.snapshot());
  // A file of another shape, or a truncated one, is refused.
  demo::eigen_policy other(demo::lm_shape{.vocab = demo::vocabulary_size(), .d = 16, .heads = 2, .ffn = 12}, 4);
  EXPECT_THROW((void)other.load(path), cr::error);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  EXPECT_THROW((void)policy.load(path), cr::error);
  std::filesystem::remove(path);
}

// The demo's policy satisfies the engine's concepts (checked when this file compiles).
static_assert(cr::Policy<demo::eigen_policy>);
static_assert(cr::Checkpointable<demo::eigen_policy>);
static_assert(cr::Teacher<demo::eigen_policy::snapshot_type>);
static_assert(cr::Policy<demo::basic_eigen_policy<double>>);

}  // namespace
