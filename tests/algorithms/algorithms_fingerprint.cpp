// Prints a hash of every output of the host algorithms on fixed inputs, one line per
// output: `name hash`. tests/algorithms/fingerprint.cmake builds this one source with
// different flags (baseline -O2; -O3 -march=native -ffp-contract=fast; ...) and
// bitwise_algorithms.cpp compares the lines: DESIGN principle 3 says the library's bits
// do not depend on the user's flags, and contraction (a * b + c fused into one FMA
// wherever the target has it) is the flag that most easily breaks that.
//
// Inputs are made with integer arithmetic and exact conversions only, so that the flags
// cannot change them (std::normal_distribution's arithmetic could itself be contracted).
// The batch spans many blocks of the canonical sum order, ragged groups and masks.
// The last line, `control`, is a plain a * b + c over the inputs: it differs between a
// build that contracts and one that does not, which shows that the contracting build
// really fused.

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/broadcast.hpp"
#include "cascade_rl/algorithms/distillation_advantages.hpp"
#include "cascade_rl/algorithms/gae_advantages.hpp"
#include "cascade_rl/algorithms/gdpo_advantages.hpp"
#include "cascade_rl/algorithms/gpg_advantages.hpp"
#include "cascade_rl/algorithms/group_statistics.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/grpo_passk_advantages.hpp"
#include "cascade_rl/algorithms/importance_weights.hpp"
#include "cascade_rl/algorithms/kl_estimators.hpp"
#include "cascade_rl/algorithms/log_probs.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/algorithms/opo_advantages.hpp"
#include "cascade_rl/algorithms/optimal_token_baseline.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/algorithms/remax_advantages.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/presets/verl_advantages.hpp"
#include "cascade_rl/presets/verl_losses.hpp"

namespace {

namespace cr = cascade_rl;
namespace exec = cascade_rl::exec;

struct splitmix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // A multiple of 2^-12 in [lo, hi): integer arithmetic and an exact scaling.
  template <class T>
  T uniform(int lo, int hi) {
    const auto span = static_cast<std::uint64_t>(hi - lo) << 12;
    const auto k = static_cast<std::int64_t>(next() % span) + (static_cast<std::int64_t>(lo) << 12);
    return static_cast<T>(k) / T(4096);
  }
};

// FNV-1a over the bytes of a value sequence.
std::uint64_t hash_bytes(const void* data, std::size_t size, std::uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

template <class V>
void print(const std::string& name, const std::vector<V>& values) {
  std::printf("%s %016" PRIx64 "\n", name.c_str(), hash_bytes(values.data(), values.size() * sizeof(V)));
}
void print(const std::string& name, double value) {
  std::printf("%s %016" PRIx64 "\n", name.c_str(), hash_bytes(&value, sizeof value));
}
void print(const std::string& name, const cr::policy_loss_result& r) {
  print(name + ".loss", r.loss);
  print(name + ".approx_kl_sum", r.metrics.approx_kl_sum);
  print(name + ".counts", std::vector<std::size_t>{r.metrics.valid_tokens, r.metrics.clipped,
                                                   r.metrics.dual_clipped, r.metrics.importance_truncated,
                                                   r.metrics.importance_masked});
}

template <class T>
struct batch {
  std::vector<T> rewards;                 // per sequence
  std::vector<std::int64_t> offsets{0};   // ragged sequences
  std::vector<std::uint8_t> mask;         // per token
  std::vector<std::int64_t> group_offsets{0};  // ragged groups
  std::vector<T> log_probs, old_log_probs, behaviour, ref, advantages, teacher;

  explicit batch(std::uint64_t seed) {
    splitmix64 rng{seed};
    std::size_t sequences = 0;
    for (int g = 0; g < 400; ++g) {
      const std::size_t size = 2 + rng.next() % 39;  // groups of 2..40 (more than a warp)
      const int kind = g % 4;                        // binary, continuous, constant, near-equal
      for (std::size_t i = 0; i < size; ++i) {
        T r = kind == 0 ? static_cast<T>(rng.next() % 2)
              : kind == 1 ? rng.uniform<T>(-3, 3)
              : kind == 2 ? T(0.5)
                          : T(1) + static_cast<T>(static_cast<int>(rng.next() % 3)) / T(1 << 20);
        rewards.push_back(r);
      }
      sequences += size;
      group_offsets.push_back(static_cast<std::int64_t>(sequences));
    }
    for (std::size_t s = 0; s < sequences; ++s) {
      const std::size_t length = 1 + rng.next() % 60;
      offsets.push_back(offsets.back() + static_cast<std::int64_t>(length));
      for (std::size_t t = 0; t < length; ++t) mask.push_back(t == 0 || rng.next() % 8 != 0);
    }
    const std::size_t n = mask.size();
    for (std::size_t t = 0; t < n; ++t) {
      const T logp = -rng.uniform<T>(0, 8);
      log_probs.push_back(logp);
      old_log_probs.push_back(logp + rng.uniform<T>(-1, 1) / T(2));
      behaviour.push_back(logp + rng.uniform<T>(-1, 1));
      ref.push_back(t % 97 == 0 ? logp - T(30) : logp + rng.uniform<T>(-2, 2));  // some beyond the clamps
      advantages.push_back(rng.uniform<T>(-3, 3));
      teacher.push_back(-rng.uniform<T>(0, 8));
    }
  }
  [[nodiscard]] cr::token_layout tokens() const { return cr::token_layout(offsets, mask); }
  [[nodiscard]] cr::group_layout groups() const { return cr::group_layout(std::span<const std::int64_t>(group_offsets)); }
};

template <class T>
void losses(const std::string& prefix, const batch<T>& b) {
  const auto tokens = b.tokens();
  const std::size_t n = tokens.tokens();
  const auto normalizer_for =
      [counts = cr::local_loss_counts(exec::seq, tokens)](cascade_rl::loss_aggregation mode) {
        return counts.normalizer(mode, 64);
      };
  const std::span<const T> logp(b.log_probs), old_logp(b.old_log_probs), behaviour(b.behaviour),
      ref(b.ref), advantages(b.advantages);
  std::vector<T> grad(n), values(n), weights(n);
  for (std::size_t t = 0; t < n; ++t) weights[t] = T(0.5) + static_cast<T>(t % 7) / T(4);  // exact
  for (const auto mode : {cr::loss_aggregation::token_mean, cr::loss_aggregation::token_sum,
                          cr::loss_aggregation::seq_mean_token_sum, cr::loss_aggregation::seq_mean_token_mean,
                          cr::loss_aggregation::seq_mean_token_sum_norm}) {
    const std::string m = prefix + "." + std::string(cr::to_string(mode));
    const cr::ppo_clip_options ppo{.clip_high = 0.28, .dual_clip = 3.0, .aggregation = mode,
                                   .importance = {.mode = cr::importance_sampling::truncated, .cap = 1.5}};
    print(m + ".ppo", cr::ppo_clip_loss(exec::seq, tokens,
                                        {.log_probs = logp,
                                         .old_log_probs = old_logp,
                                         .advantages = advantages,
                                         .behaviour_log_probs = behaviour},
                                        grad, normalizer_for(mode), ppo));
    print(m + ".ppo.grad", grad);
    const cr::cispo_options cispo{.clip_low = 0.1, .clip_high = 0.28, .aggregation = mode};
    print(m + ".cispo", cr::cispo_loss(exec::seq, tokens,
                                       {.log_probs = logp,
                                        .old_log_probs = old_logp,
                                        .advantages = advantages,
                                        .rollout_is_weights = weights},
                                       grad, normalizer_for(mode), cispo));
    print(m + ".cispo.grad", grad);
    print(m + ".dro", cr::dro_loss(exec::seq, tokens,
                                   {.log_probs = logp,
                                    .old_log_probs = old_logp,
                                    .advantages = advantages,
                                    .rollout_is_weights = weights},
                                   grad, normalizer_for(mode), {.beta = 0.5, .aggregation = mode}));
    print(m + ".dro.grad", grad);
    print(m + ".sapo", cr::sapo_loss(exec::seq, tokens,
                                     {.log_probs = logp,
                                      .old_log_probs = old_logp,
                                      .advantages = advantages,
                                      .rollout_is_weights = weights},
                                     grad, normalizer_for(mode), {.aggregation = mode}));
    print(m + ".sapo.grad", grad);
    for (const auto divergence :
         {cr::dppo_divergence::total_variation, cr::dppo_divergence::binary_kl}) {
      const cr::dppo_options dppo{
          .divergence = divergence, .clip_high = 0.05, .truncation = 1.5, .aggregation = mode};
      const std::string d =
          m + (divergence == cr::dppo_divergence::binary_kl ? ".dppo_kl" : ".dppo_tv");
      print(d, cr::dppo_loss(exec::seq, tokens,
                             {.log_probs = logp,
                              .old_log_probs = old_logp,
                              .advantages = advantages,
                              .rollout_is_weights = weights},
                             grad, normalizer_for(mode), dppo));
      print(d + ".grad", grad);
    }
    cr::reinforce_options reinforce{.aggregation = mode};
    print(m + ".reinforce",
          cr::reinforce_loss(exec::seq, tokens, {.log_probs = logp, .advantages = advantages}, grad,
                             normalizer_for(mode), reinforce));
    print(m + ".reinforce.grad", grad);
    auto mopd = cr::mopd_options();
    mopd.aggregation = mode;
    print(m + ".mopd",
          cr::reinforce_loss(
              exec::seq, tokens,
              {.log_probs = logp, .advantages = advantages, .behaviour_log_probs = behaviour}, grad,
              normalizer_for(mode), mopd));
    print(m + ".mopd.grad", grad);
    print(m + ".gpg",
          cr::reinforce_loss(
              exec::seq, tokens,
              {.log_probs = logp, .advantages = advantages, .rollout_is_weights = weights}, grad,
              normalizer_for(mode), cr::presets::verl::gpg_loss(mode)));
    print(m + ".gpg.grad", grad);
    print(m + ".aggregate", cr::aggregate_token_losses(
                                exec::seq, tokens, {.token_losses = ref, .token_grads = advantages},
                                grad, normalizer_for(mode), mode));
    print(m + ".aggregate.grad", grad);
  }
  for (const auto estimator :
       {cr::kl_estimator::k1, cr::kl_estimator::abs, cr::kl_estimator::k2, cr::kl_estimator::k3})
    for (const bool straight_through : {false, true}) {
      const std::string k =
          prefix + ".kl." + std::string(cr::to_string(estimator)) + (straight_through ? "+" : "");
      const cr::kl_options kl{.estimator = estimator, .straight_through = straight_through};
      print(k + ".penalty",
            cr::kl_penalty(exec::seq, tokens, {.log_probs = logp, .ref_log_probs = ref}, values,
                           grad, kl));
      print(k + ".values", values);
      print(k + ".grad", grad);
      print(k + ".loss",
            cr::kl_loss(exec::seq, tokens, {.log_probs = logp, .ref_log_probs = ref}, grad,
                        normalizer_for(cr::loss_aggregation::seq_mean_token_mean),
                        {.kl = kl,
                         .coefficient = 0.1,
                         .aggregation = cr::loss_aggregation::seq_mean_token_mean}));
      print(k + ".loss.grad", grad);
    }
  const auto counts = cr::importance_weights(
      exec::seq, tokens, {.target_log_probs = old_logp, .behaviour_log_probs = behaviour}, values,
      {.mode = cr::importance_sampling::band_mask});
  print(prefix + ".importance_weights", values);
  print(prefix + ".importance_weights.masked", std::vector<std::size_t>{counts.masked});
}

template <class T>
void advantages(const std::string& prefix, const batch<T>& b) {
  const auto tokens = b.tokens();
  const auto groups = b.groups();
  const std::span<const T> rewards(b.rewards);
  const std::size_t s = b.rewards.size(), n = tokens.tokens();
  std::vector<cr::group_statistic> stats(groups.groups());
  cr::group_statistics(exec::seq, groups, rewards, std::span<cr::group_statistic>(stats));
  std::vector<double> fields;  // field by field: padding bytes are unspecified
  for (const auto& g : stats) fields.insert(fields.end(), {g.mean, g.std, g.min, g.max});
  print(prefix + ".group_statistics", fields);
  std::vector<T> a(s), b2(s);
  cr::leave_one_out_statistics(exec::seq, groups, rewards, a, b2);
  print(prefix + ".leave_one_out.mean", a);
  print(prefix + ".leave_one_out.std", b2);
  cr::grpo_advantages(exec::seq, groups, rewards, a);
  print(prefix + ".grpo", a);
  cr::grpo_advantages(exec::seq, groups, rewards, a, cr::presets::verl::grpo());
  print(prefix + ".grpo.verl", a);
  cr::rloo_advantages(exec::seq, groups, rewards, a);
  print(prefix + ".rloo", a);
  cr::gpg_advantages(exec::seq, groups, rewards, a, cr::presets::verl::gpg(2.0));
  print(prefix + ".gpg", a);
  cr::grpo_passk_advantages(exec::seq, groups, rewards, a,
                            {.singleton = cr::singleton_rule::zero_advantage});
  print(prefix + ".grpo_passk", a);
  std::vector<T> placed(n), out(n);
  cr::place_on_last_valid_token(exec::seq, tokens, rewards, placed);
  cr::reinforce_plus_plus_advantages(exec::seq, tokens, placed, out, {.gamma = 0.9});
  print(prefix + ".reinforce_plus_plus", out);
  cr::reinforce_plus_plus_baseline_advantages(exec::seq, groups, tokens, rewards, out);
  print(prefix + ".reinforce_plus_plus_baseline", out);
  cr::masked_whiten(exec::seq, tokens, b.advantages, out);
  print(prefix + ".masked_whiten", out);
  cr::distillation_advantages(
      exec::seq, tokens, {.teacher_log_probs = b.teacher, .student_log_probs = b.log_probs}, out);
  print(prefix + ".distillation", out);
  std::vector<T> returns(n);
  cr::gae_advantages(exec::seq, tokens, {.token_rewards = placed, .values = b.advantages}, out,
                     returns, {.gamma = 0.99, .lambda = 0.95});
  print(prefix + ".gae", out);
  print(prefix + ".gae.returns", returns);
  cr::remax_advantages(exec::seq, tokens,
                       {.token_rewards = b.advantages, .reward_baselines = rewards}, out, returns);
  print(prefix + ".remax", out);
  print(prefix + ".remax.returns", returns);
  cr::opo_advantages(exec::seq, groups, tokens, rewards, out, cr::presets::verl::opo());
  print(prefix + ".opo", out);
  std::vector<T> components(b.rewards);
  for (const T r : b.rewards) components.push_back(r * r);
  const std::vector<double> weights{0.5, 1.0};
  cr::gdpo_advantages(exec::seq, groups, tokens,
                      {.component_scores = components, .weights = weights}, out,
                      {.grpo = {.singleton = cr::singleton_rule::raw_score}});
  print(prefix + ".gdpo", out);
  std::vector<T> spi(n), rho(n);
  for (std::size_t t = 0; t < n; ++t) {
    // Small integers over 16: exact, so no contraction can change the inputs.
    spi[t] = static_cast<T>(t % 7 + 2) / T(16);
    rho[t] = static_cast<T>(t % 13 + 10) / T(16);
  }
  cr::optimal_token_baseline_advantages(exec::seq, groups, tokens,
                                        {.token_rewards = b.advantages,
                                         .old_log_probs = b.log_probs,
                                         .sum_pi_squared = spi,
                                         .rollout_is_weights = {}},
                                        out, returns,
                                        cr::presets::verl::optimal_token_baseline(true));
  print(prefix + ".optimal_token_baseline", out);
  print(prefix + ".optimal_token_baseline.returns", returns);
  cr::optimal_token_baseline_advantages(exec::seq, groups, tokens,
                                        {.token_rewards = b.advantages,
                                         .old_log_probs = b.log_probs,
                                         .sum_pi_squared = spi,
                                         .rollout_is_weights = rho},
                                        out, returns,
                                        cr::presets::verl::tir_optimal_token_baseline());
  print(prefix + ".tir_optimal_token_baseline", out);
  print(prefix + ".tir_optimal_token_baseline.returns", returns);
}

void log_probs() {
  splitmix64 rng{99};
  for (const std::size_t vocab : {std::size_t{7}, std::size_t{1000}, std::size_t{5003}}) {
    const std::size_t rows = 37;
    std::vector<float> logits(rows * vocab);
    std::vector<std::int64_t> labels(rows);
    for (auto& x : logits) x = rng.uniform<float>(-20, 20);
    for (auto& l : labels) l = static_cast<std::int64_t>(rng.next() % vocab);
    std::vector<float> logp(rows), entropy(rows);
    for (const float temperature : {1.0f, 0.7f}) {
      cr::log_probs_from_logits(exec::seq, {.vocab = vocab}, logits,
                                std::span<const std::int64_t>(labels), std::span<float>(logp),
                                std::span<float>(entropy), temperature);
      const std::string name = "log_probs.v" + std::to_string(vocab) + ".t" + std::to_string(temperature);
      print(name, logp);
      print(name + ".entropy", entropy);
    }
  }
}

// a * b + c in a plain loop: fused (one rounding) in a contracting build, not otherwise.
[[gnu::noinline]] void control() {
  splitmix64 rng{7};
  std::vector<double> a(4096), b(4096), c(4096), r(4096);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = rng.uniform<double>(-1, 1) / 3;  // not a multiple of 2^-12: the product rounds
    b[i] = rng.uniform<double>(-1, 1) / 7;
    c[i] = rng.uniform<double>(-1, 1);
  }
  for (std::size_t i = 0; i < a.size(); ++i) r[i] = a[i] * b[i] + c[i];
  print("control", r);
}

}  // namespace

int main() {
  const batch<float> f(1);
  const batch<double> d(2);
  losses("float", f);
  losses("double", d);
  advantages("float", f);
  advantages("double", d);
  log_probs();
  control();
  return 0;
}
