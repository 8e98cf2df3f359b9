// Numerical edge cases of the advantage, log-prob and loss entry points, each under
// every option that changes how it is handled (issue 9):
//   near-constant groups (seven rewards of 0.35f and one 1 ulp above), NaN and infinite
//   rewards under each nonfinite_rule, logits of +/-1e4 and -inf (masked vocabulary),
//   fully masked sequences and micro-batches for every loss, groups of one under each
//   singleton_rule, G = 4096, and an empty batch.
//
// "Must not blow up" (near-constant groups): a group whose rewards differ by one ulp is
// not zero-variance (max != min), so it is standardised; the epsilon guard then bounds
// its advantages by |r - mean| / eps. With the default eps = 1e-6 every advantage of
// the group is below 0.1 in magnitude under every option (measured: at most 0.058, with
// the biased std and a float32 mean; 0.026 for the defaults; 3e-5 with eps inside the
// sqrt), i.e. at least 10x smaller than the advantages of a group with a real spread
// (|A| ~ 1). With eps = 0 the user has removed the guard: the group is standardised
// exactly, and its advantages stay within sqrt(G) (2.83 for G = 8; sqrt(G - 1) bounds
// any group standardised with its exact mean, and a float32 mean's rounding adds the
// rest): finite and never orders of magnitude above an ordinary group's. Dr. GRPO and RLOO (no std) stay at the ulp scale.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "cascade_rl/cascade_rl.hpp"
#include "support/expect_error.hpp"

namespace {

namespace cr = cascade_rl;

std::vector<float> near_constant_rewards() {
  std::vector<float> r(8, 0.35f);
  r[5] = std::nextafter(0.35f, 1.0f);
  return r;
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

const cr::mean_accumulation accumulations[] = {cr::mean_accumulation::double_precision,
                                               cr::mean_accumulation::float32_sequential,
                                               cr::mean_accumulation::float32_rounded_sum};

TEST(NearConstantGroup, GrpoAdvantagesStaySmallUnderEveryOption) {
  const auto rewards = near_constant_rewards();
  const auto groups = cr::group_layout::uniform({.groups = 1, .size = 8});
  for (const auto accumulation : accumulations)
    for (const auto placement : {cr::epsilon_placement::added_to_std, cr::epsilon_placement::inside_sqrt})
      for (const auto estimator : {cr::std_estimator::biased, cr::std_estimator::unbiased})
        for (const double eps : {1e-6, 1e-8, 0.0})
          for (const bool scale : {true, false}) {
            std::vector<float> a(8, 99.0f);
            const cr::grpo_options o{.scale_by_std = scale, .epsilon = eps, .epsilon_at = placement,
                                     .estimator = estimator, .accumulation = accumulation};
            cr::grpo_advantages(cr::exec::seq, groups, rewards, a, o);
            SCOPED_TRACE(testing::Message() << "eps " << eps << " scale " << scale << " placement "
                                            << static_cast<int>(placement) << " estimator "
                                            << static_cast<int>(estimator) << " accumulation "
                                            << static_cast<int>(accumulation));
            ASSERT_TRUE(all_finite(a));
            if (!scale) {
              EXPECT_LE(max_abs(a), 6e-8f);  // Dr. GRPO: r - mean, within two ulps of 0.35f
            } else if (eps >= 1e-6) {
              EXPECT_LT(max_abs(a), 0.1f);
            } else {
              EXPECT_LE(max_abs(a), std::sqrt(8.0f) * 1.0001f);  // sqrt(G)
            }
            std::vector<float> b(8);
            cr::grpo_advantages(cr::exec::par, groups, rewards, b, o);
            EXPECT_EQ(a, b);
          }
}

TEST(NearConstantGroup, RlooAndBaselineStayAtTheUlpScale) {
  const auto rewards = near_constant_rewards();
  const auto groups = cr::group_layout::uniform({.groups = 1, .size = 8});
  for (const auto accumulation : accumulations) {
    std::vector<float> a(8, 99.0f);
    cr::rloo_advantages(cr::exec::seq, groups, rewards, a, {.accumulation = accumulation});
    ASSERT_TRUE(all_finite(a));
    EXPECT_LE(max_abs(a), 9e-8f);  // three ulps of 0.35f
  }
}

TEST(ZeroVarianceGroup, GetsExactlyZeroEvenWithoutEpsilon) {
  const std::vector<float> rewards(8, 0.35f);
  for (const double eps : {1e-6, 0.0})
    for (const auto accumulation : accumulations) {
      std::vector<float> a(8, 99.0f);
      cr::grpo_advantages(cr::exec::seq, cr::group_layout::uniform({.groups = 1, .size = 8}),
                          rewards, a, {.epsilon = eps, .accumulation = accumulation});
      for (float x : a) EXPECT_EQ(x, 0.0f);
    }
}

// ---- NaN and infinite rewards -------------------------------------------------------------

const float nonfinite_values[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity()};

TEST(NonfiniteRewards, ErrorRuleRefusesNamingTheIndex) {
  for (const float bad : nonfinite_values) {
    std::vector<float> rewards = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
    rewards[6] = bad;
    std::vector<float> a(8);
    const auto groups = cr::group_layout::uniform({.groups = 2, .size = 4});
    cr::testing::expect_error_naming(
        [&] { cr::grpo_advantages(cr::exec::seq, groups, rewards, a); }, "rewards", "6");
    cr::testing::expect_error_naming(
        [&] { cr::grpo_advantages(cr::exec::par, groups, rewards, a); }, "rewards", "6");
    cr::testing::expect_error_naming(
        [&] { cr::rloo_advantages(cr::exec::seq, groups, rewards, a); }, "rewards", "6");
  }
}

TEST(NonfiniteRewards, ZeroGroupRuleZeroesOnlyThatGroup) {
  for (const float bad : nonfinite_values)
    for (const bool scale : {true, false}) {
      std::vector<float> rewards = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
      rewards[6] = bad;
      const auto groups = cr::group_layout::uniform({.groups = 2, .size = 4});
      std::vector<float> a(8, 99.0f), clean(4);
      cr::grpo_advantages(cr::exec::seq, groups, rewards, a,
                          {.scale_by_std = scale, .nonfinite = cr::nonfinite_rule::zero_group});
      cr::grpo_advantages(cr::exec::seq, cr::group_layout::uniform({.groups = 1, .size = 4}),
                          std::span<const float>(rewards).first(4), clean, {.scale_by_std = scale});
      for (int i = 0; i < 4; ++i) EXPECT_EQ(a[i], clean[i]);
      for (int i = 4; i < 8; ++i) EXPECT_EQ(a[i], 0.0f);
      std::vector<float> r(8, 99.0f);
      cr::rloo_advantages(cr::exec::par, groups, rewards, r,
                          {.nonfinite = cr::nonfinite_rule::zero_group});
      EXPECT_TRUE(all_finite(r));
      for (int i = 4; i < 8; ++i) EXPECT_EQ(r[i], 0.0f);
    }
}

// ---- groups of one, G = 4096, empty batch ---------------------------------------------------

TEST(GroupsOfOne, EachSingletonRule) {
  const std::vector<float> rewards = {0.25f, -1.5f, 3.0f};
  const auto groups = cr::group_layout::uniform({.groups = 3, .size = 1});
  std::vector<float> a(3, 99.0f);
  cr::testing::expect_error_naming([&] { cr::grpo_advantages(cr::exec::seq, groups, rewards, a); },
                                   "group");
  cr::grpo_advantages(cr::exec::seq, groups, rewards, a,
                      {.singleton = cr::singleton_rule::zero_advantage});
  for (float x : a) EXPECT_EQ(x, 0.0f);
  cr::grpo_advantages(cr::exec::seq, groups, rewards, a,
                      {.singleton = cr::singleton_rule::raw_score});
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(a[i], rewards[i] / (1 + 1e-6));
  // Biased std: a group of one is zero-variance and gets 0 under the default rule.
  cr::grpo_advantages(cr::exec::seq, groups, rewards, a, {.estimator = cr::std_estimator::biased});
  for (float x : a) EXPECT_EQ(x, 0.0f);
  cr::testing::expect_error_naming([&] { cr::rloo_advantages(cr::exec::seq, groups, rewards, a); },
                                   "group");
  cr::rloo_advantages(cr::exec::seq, groups, rewards, a,
                      {.singleton = cr::singleton_rule::zero_advantage});
  for (float x : a) EXPECT_EQ(x, 0.0f);
}

TEST(LargeGroup, G4096IsStandardisedAndExecutorsAgree) {
  const std::size_t g = 4096;
  std::vector<float> rewards(2 * g);
  for (std::size_t i = 0; i < rewards.size(); ++i) rewards[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f;
  const auto groups = cr::group_layout::uniform({.groups = 2, .size = g});
  std::vector<float> a(2 * g), b(2 * g);
  cr::grpo_advantages(cr::exec::seq, groups, rewards, a);
  cr::grpo_advantages(cr::exec::par, groups, rewards, b);
  EXPECT_EQ(a, b);
  for (std::size_t k = 0; k < 2; ++k) {
    double s = 0, s2 = 0;
    for (std::size_t i = k * g; i < (k + 1) * g; ++i) s += a[i], s2 += double(a[i]) * a[i];
    EXPECT_NEAR(s / g, 0.0, 1e-5);
    EXPECT_NEAR(s2 / (g - 1), 1.0, 1e-3);
  }
  cr::rloo_advantages(cr::exec::par, groups, rewards, b);
  EXPECT_TRUE(all_finite(b));
}

TEST(EmptyBatch, AdvantagesLogProbsAndLossesAcceptIt) {
  const std::vector<float> none;
  std::vector<float> out;
  cr::grpo_advantages(cr::exec::seq, cr::group_layout::uniform({.groups = 0, .size = 8}), none,
                      out);
  cr::rloo_advantages(cr::exec::par, cr::group_layout::uniform({.groups = 0, .size = 8}), none,
                      out);
  const std::vector<std::int64_t> labels;
  cr::log_probs_from_logits(cr::exec::seq, {.vocab = 16}, none,
                            std::span<const std::int64_t>(labels), std::span<float>(out),
                            std::span<float>());
  const std::vector<std::int64_t> offsets = {0};
  const cr::token_layout layout(offsets);
  const cr::loss_normalizer norm{.tokens = 1, .sequences = 1};
  const auto r =
      cr::reinforce_loss(cr::exec::seq, layout, {.log_probs = none, .advantages = none}, out, norm);
  EXPECT_EQ(r.loss, 0.0);
  const auto p = cr::ppo_clip_loss(
      cr::exec::par, layout,
      {.log_probs = none, .old_log_probs = none, .advantages = none, .behaviour_log_probs = none},
      out, norm);
  EXPECT_EQ(p.loss, 0.0);
}

// ---- log-probs from extreme logits ----------------------------------------------------------

TEST(ExtremeLogits, PlusMinus1e4AndMaskedVocabulary) {
  const std::size_t vocab = 2500;  // spans several 1024-float chunks
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits(4 * vocab, 0.0f);
  // row 0: one +1e4 logit among zeros; row 1: +1e4 and -1e4; row 2: all -inf but two
  // (masked vocabulary); row 3: every entry -1e4 except one -inf.
  logits[0 * vocab + 7] = 1e4f;
  logits[1 * vocab + 3] = 1e4f;
  logits[1 * vocab + 2000] = -1e4f;
  for (std::size_t v = 0; v < vocab; ++v) logits[2 * vocab + v] = -inf;
  logits[2 * vocab + 5] = 1.0f;
  logits[2 * vocab + 2400] = 1.0f;
  for (std::size_t v = 0; v < vocab; ++v) logits[3 * vocab + v] = -1e4f;
  logits[3 * vocab + 9] = -inf;
  const std::vector<std::int64_t> labels = {7, 2000, 2400, 10};
  for (const float temperature : {1.0f, 0.7f, 2.0f}) {
    std::vector<float> lp(4), ent(4), lp_par(4), ent_par(4);
    cr::log_probs_from_logits(cr::exec::seq, {.vocab = vocab}, logits,
                              std::span<const std::int64_t>(labels), std::span<float>(lp),
                              std::span<float>(ent), temperature);
    cr::log_probs_from_logits(cr::exec::par, {.vocab = vocab}, logits,
                              std::span<const std::int64_t>(labels), std::span<float>(lp_par),
                              std::span<float>(ent_par), temperature);
    EXPECT_EQ(lp, lp_par);
    EXPECT_EQ(ent, ent_par);
    EXPECT_EQ(lp[0], 0.0f);  // exp(-1e4) vanishes next to exp(0)
    EXPECT_NEAR(ent[0], 0.0f, 1e-6f);
    EXPECT_NEAR(lp[1], -2e4f / temperature, 1.0f);
    EXPECT_NEAR(ent[1], 0.0f, 1e-6f);
    EXPECT_NEAR(lp[2], -std::log(2.0f), 1e-6f);  // two live entries of equal logit
    EXPECT_NEAR(ent[2], std::log(2.0f), 1e-6f);
    EXPECT_NEAR(lp[3], -std::log(float(vocab - 1)), 1e-4f);
    EXPECT_NEAR(ent[3], std::log(float(vocab - 1)), 1e-4f);
    for (int r = 0; r < 4; ++r) EXPECT_TRUE(std::isfinite(lp[r]) && std::isfinite(ent[r]));
  }
  // A label on a masked (-inf) entry has log-prob -inf, not NaN.
  const std::vector<std::int64_t> masked_label = {0};
  std::vector<float> lp(1), ent(1);
  cr::log_probs_from_logits(
      cr::exec::seq, {.vocab = vocab}, std::span<const float>(logits).subspan(2 * vocab, vocab),
      std::span<const std::int64_t>(masked_label), std::span<float>(lp), std::span<float>(ent));
  EXPECT_EQ(lp[0], -inf);
  EXPECT_NEAR(ent[0], std::log(2.0f), 1e-6f);
}

// ---- fully masked sequences and micro-batches, every loss -----------------------------------

const cr::loss_aggregation aggregations[] = {cr::loss_aggregation::token_mean, cr::loss_aggregation::token_sum,
                                             cr::loss_aggregation::seq_mean_token_sum,
                                             cr::loss_aggregation::seq_mean_token_mean,
                                             cr::loss_aggregation::seq_mean_token_sum_norm};

struct batch {
  std::vector<std::int64_t> offsets = {0, 3, 7, 8, 12};
  std::vector<std::uint8_t> mask;
  std::vector<float> logp, old_logp, behaviour, adv;
  explicit batch(bool all_masked) {
    mask = all_masked ? std::vector<std::uint8_t>(12, 0)
                      : std::vector<std::uint8_t>{1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1, 1};  // sequence 1 fully masked
    for (int t = 0; t < 12; ++t) {
      logp.push_back(-0.1f * float(t + 1));
      old_logp.push_back(-0.1f * float(t + 1) + 0.05f * float(t % 3 - 1));
      behaviour.push_back(-0.1f * float(t + 1) - 0.3f * float(t % 2));
      adv.push_back(t % 2 ? 0.7f : -1.3f);
    }
  }
};

template <class Loss>
void expect_masked_tokens_silent(const Loss& loss, bool all_masked) {
  batch b(all_masked);
  const cr::token_layout layout(b.offsets, b.mask);
  std::vector<float> grad(12, 99.0f);
  const cr::policy_loss_result r = loss(b, layout, grad);
  EXPECT_TRUE(std::isfinite(r.loss));
  for (int t = 0; t < 12; ++t)
    if (!b.mask[t]) {
      EXPECT_EQ(grad[t], 0.0f) << "token " << t;
    }
  for (float g : grad) EXPECT_TRUE(std::isfinite(g));
  if (all_masked) {
    EXPECT_EQ(r.loss, 0.0);
    EXPECT_EQ(r.metrics.valid_tokens, 0u);
    EXPECT_EQ(r.metrics.clip_fraction(), 0.0);
    EXPECT_EQ(r.metrics.approx_kl(), 0.0);
  }
}

TEST(FullyMasked, EveryLossEveryAggregation) {
  // The normaliser is the step's (other micro-batches have tokens), so it is positive
  // even when this micro-batch has none.
  for (const bool all_masked : {false, true})
    for (const auto aggregation : aggregations) {
      SCOPED_TRACE(testing::Message() << "aggregation " << cr::to_string(aggregation) << " all masked " << all_masked);
      const cr::loss_normalizer norm{
          .mode = aggregation, .tokens = 40, .sequences = 10, .scale = 16};
      for (const auto surrogate : {cr::reinforce_surrogate::ratio, cr::reinforce_surrogate::log_prob})
        for (const auto& importance :
             {cr::importance_options{}, cr::mopd_options().importance,
              cr::importance_options{.mode = cr::importance_sampling::truncated}}) {
          const cr::reinforce_options o{.aggregation = aggregation, .surrogate = surrogate, .importance = importance};
          expect_masked_tokens_silent(
              [&](const batch& b, const cr::token_layout& layout, std::vector<float>& grad) {
                return cr::reinforce_loss(
                    cr::exec::seq, layout,
                    {.log_probs = b.logp, .advantages = b.adv, .behaviour_log_probs = b.behaviour},
                    grad, norm, o);
              },
              all_masked);
        }
      for (const auto& dual : {std::optional<double>{}, std::optional<double>{3.0}}) {
        const cr::ppo_clip_options o{.clip_high = 0.28, .dual_clip = dual, .aggregation = aggregation};
        for (const auto& policy_par : {false, true})
          expect_masked_tokens_silent(
              [&](const batch& b, const cr::token_layout& layout, std::vector<float>& grad) {
                const auto call = [&](const auto& exec) {
                  return cr::ppo_clip_loss(exec, layout,
                                           {.log_probs = b.logp,
                                            .old_log_probs = b.old_logp,
                                            .advantages = b.adv,
                                            .behaviour_log_probs = b.behaviour},
                                           grad, norm, o);
                };
                return policy_par ? call(cr::exec::par) : call(cr::exec::seq);
              },
              all_masked);
      }
    }
}

}  // namespace
