#pragma once
// The metrics of a policy loss: sums over the valid tokens of one slice, so that
// slices, threads, warps and ranks add them (or all-reduce them) before taking
// fractions. One struct with one field list (for_each_count), used by the host loops,
// the CUDA kernels' tallies, the all-reduce and the engine's totals.

#include <cstddef>

#include "cascade_rl/core/host_device.hpp"

namespace cascade_rl {

struct policy_loss_metrics {
  std::size_t valid_tokens = 0;
  // PPO: the ratio clip is active, l2 > l1 (veRL pg_clipfrac). For A > 0 that is
  // r > 1 + clip_high, for A < 0 it is r < 1 - clip_low.
  std::size_t clipped = 0;
  // PPO: the dual clip bounds the loss, A < 0 and l > -A * c (veRL pg_clipfrac_lower).
  std::size_t dual_clipped = 0;
  // PPO: sum of old_logp - logp after the log-ratio clamp (veRL ppo_kl is its mean).
  // Each loss sums what veRL's ppo_kl averages for it: KL-Cov sums |logp - old_logp|.
  double approx_kl_sum = 0;
  // Importance correction: tokens whose ratio the cap truncated / the band dropped.
  std::size_t importance_truncated = 0;
  std::size_t importance_masked = 0;

  // f(a.field, b.field) for every integer field, in declaration order: the one list of
  // the counts (adding, all-reducing and copying them all go through it). approx_kl_sum,
  // the one floating-point sum, is apart: its order of addition is fixed separately (the
  // canonical order on every executor, a rank-ordered sum across ranks).
  // (nvcc: f may be a host lambda when the caller is host code, as in the all-reduce.)
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
  template <class A, class B, class F>
  CASCADE_RL_HD static constexpr void for_each_count(A& a, B& b, F&& f) {
    f(a.valid_tokens, b.valid_tokens);
    f(a.clipped, b.clipped);
    f(a.dual_clipped, b.dual_clipped);
    f(a.importance_truncated, b.importance_truncated);
    f(a.importance_masked, b.importance_masked);
  }
  CASCADE_RL_HD constexpr policy_loss_metrics& operator+=(const policy_loss_metrics& other) {
    for_each_count(*this, other, [](std::size_t& mine, const std::size_t& theirs) { mine += theirs; });
    approx_kl_sum += other.approx_kl_sum;
    return *this;
  }

  [[nodiscard]] constexpr double clip_fraction() const { return fraction(clipped); }
  [[nodiscard]] constexpr double dual_clip_fraction() const { return fraction(dual_clipped); }
  [[nodiscard]] constexpr double approx_kl() const {
    return valid_tokens == 0 ? 0.0 : approx_kl_sum / static_cast<double>(valid_tokens);
  }
  [[nodiscard]] constexpr double truncated_fraction() const { return fraction(importance_truncated); }
  [[nodiscard]] constexpr double masked_fraction() const { return fraction(importance_masked); }

 private:
  [[nodiscard]] constexpr double fraction(std::size_t count) const {
    return valid_tokens == 0 ? 0.0
                             : static_cast<double>(count) / static_cast<double>(valid_tokens);
  }
};

// How many counts for_each_count visits; a field added to the struct but not to the list
// fails the size check.
inline constexpr std::size_t policy_loss_count_fields = [] {
  policy_loss_metrics m;
  std::size_t n = 0;
  policy_loss_metrics::for_each_count(m, m, [&](std::size_t&, std::size_t&) { ++n; });
  return n;
}();
static_assert(sizeof(policy_loss_metrics) ==
                  policy_loss_count_fields * sizeof(std::size_t) + sizeof(double),
              "every count of policy_loss_metrics must be in for_each_count");

// The aggregated loss of a slice with its metrics. Results of slices add up.
struct policy_loss_result {
  double loss = 0;
  policy_loss_metrics metrics{};

  CASCADE_RL_HD constexpr policy_loss_result& operator+=(const policy_loss_result& other) {
    loss += other.loss;
    metrics += other.metrics;
    return *this;
  }
};

}  // namespace cascade_rl
