// exec::omp (core/exec_openmp.hpp): compiled with OpenMP, it gives exec::seq's bits for
// any thread count, and visits every index once.
#include <gtest/gtest.h>

#include <omp.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/core/exec_openmp.hpp"
#include "cascade_rl/core/parallel.hpp"

namespace {

namespace cr = cascade_rl;
namespace exec = cascade_rl::exec;
namespace detail = cascade_rl::detail;

template <class T>
bool same_bits(const T& a, const T& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(OpenMpPolicy, IsAHostPolicyWithOpenMpsDefaultThreadCount) {
  static_assert(exec::host_policy<exec::openmp_policy>);
  EXPECT_EQ(detail::thread_count(exec::omp), omp_get_max_threads());
  EXPECT_EQ(detail::thread_count(exec::omp.with_threads(3)), 3);
}

TEST(OpenMpPolicy, VisitsEveryIndexOnce) {
  const std::size_t n = 5 * detail::parallel_threshold + 3;
  for (int threads : {1, 2, 7}) {
    std::vector<int> visits(n, 0);
    detail::for_each_index(exec::omp.with_threads(threads), n, [&](std::size_t i) { ++visits[i]; });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(visits[i], 1) << "index " << i << ", " << threads << " threads";
  }
}

TEST(OpenMpPolicy, CanonicalSumsAndLossesHaveSequentialBits) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t sequences = 37;
  std::vector<std::int64_t> offsets{0};
  for (std::size_t i = 0; i < sequences; ++i) offsets.push_back(offsets.back() + 300 + static_cast<std::int64_t>(i * 97));
  const cr::token_layout layout(offsets);  // ~80k tokens: twenty blocks of the canonical order
  const std::size_t n = layout.tokens();
  std::vector<float> log_probs(n), old_log_probs(n), advantages(n);
  for (std::size_t t = 0; t < n; ++t) {
    log_probs[t] = -std::abs(normal(rng));
    old_log_probs[t] = log_probs[t] + 0.3f * normal(rng);
    advantages[t] = normal(rng);
  }
  const auto term = [&](std::size_t i) { return static_cast<double>(advantages[i]) * 1e3; };
  const double sum = detail::blocked_sum(exec::seq, n, term);
  const auto normalizer_for =
      [counts = cr::local_loss_counts(exec::seq, layout)](cascade_rl::loss_aggregation mode) {
        return counts.normalizer(mode, 1.0);
      };
  std::vector<float> grad_seq(n), grad_omp(n);
  const cr::ppo_clip_options options{.dual_clip = 3.0};
  const auto seq = cr::ppo_clip_loss(
      exec::seq, layout,
      {.log_probs = log_probs, .old_log_probs = old_log_probs, .advantages = advantages}, grad_seq,
      normalizer_for(options.aggregation), options);
  for (int threads : {1, 2, 7}) {
    const auto policy = exec::omp.with_threads(threads);
    EXPECT_TRUE(same_bits(sum, detail::blocked_sum(policy, n, term))) << threads << " threads";
    const auto omp = cr::ppo_clip_loss(
        policy, layout,
        {.log_probs = log_probs, .old_log_probs = old_log_probs, .advantages = advantages},
        grad_omp, normalizer_for(options.aggregation), options);
    EXPECT_TRUE(same_bits(seq.loss, omp.loss)) << threads << " threads";
    EXPECT_TRUE(same_bits(seq.metrics.approx_kl_sum, omp.metrics.approx_kl_sum)) << threads << " threads";
    EXPECT_EQ(seq.metrics.clipped, omp.metrics.clipped);
    EXPECT_EQ(std::memcmp(grad_seq.data(), grad_omp.data(), n * sizeof(float)), 0) << threads << " threads";
  }
}

}  // namespace
