// libtorch renderings of the kernels, written the way Python trainers write them
// (veRL-style: log_softmax + gather, the group view with mean/std, the clipped loss with
// autograd for dL/dlogp), at exec::par's thread count, on the same sizes and with the
// same byte counts as the cascade_rl benchmarks, so that scripts/bench_table.py can
// divide one by the other. Built only when find_package(Torch) succeeds.

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "bandwidth.hpp"

namespace {

namespace bench = cascade_rl::bench;

void use_library_threads() {
  at::set_num_threads(cascade_rl::detail::thread_count(cascade_rl::exec::par));
}

std::int64_t rows_for(std::int64_t vocab) { return vocab <= 4096 ? 64 : (std::int64_t{32} << 20) / vocab; }

// verl.utils.torch_functional's masked reductions, as veRL's estimators and losses call them.
torch::Tensor masked_sum(const torch::Tensor& values, const torch::Tensor& mask) {
  return (torch::where(mask.to(torch::kBool), values, torch::zeros_like(values)) * mask).sum();
}
torch::Tensor masked_mean(const torch::Tensor& values, const torch::Tensor& mask) {
  return masked_sum(values, mask) / (mask.sum() + 1e-8);
}
torch::Tensor masked_whiten(const torch::Tensor& values, const torch::Tensor& mask) {
  const auto mean = masked_mean(values, mask);
  const auto centered = values - mean;
  const auto mask_sum = mask.sum();
  const auto variance = masked_mean(centered * centered, mask) * (mask_sum / (mask_sum - 1));
  return (values - mean) * torch::rsqrt(variance + 1e-8);
}

void torch_log_probs(benchmark::State& state, torch::Dtype dtype) {
  use_library_threads();
  torch::NoGradGuard no_grad;
  const std::int64_t vocab = state.range(0), rows = rows_for(vocab);
  torch::manual_seed(5);
  const auto logits = (3 * torch::randn({rows, vocab})).to(dtype);
  const auto labels = torch::randint(vocab, {rows}, torch::kLong);
  bench::bandwidth_meter meter(state, bench::limit::read);
  for (auto _ : state) {
    const auto logp_all = torch::log_softmax(logits.to(torch::kFloat), -1);
    const auto logp = logp_all.gather(-1, labels.unsqueeze(-1)).squeeze(-1);
    const auto entropy = -(logp_all.exp() * logp_all).sum(-1);
    benchmark::DoNotOptimize(logp.data_ptr());
    benchmark::DoNotOptimize(entropy.data_ptr());
  }
  meter.report(static_cast<std::size_t>(rows * vocab) * (dtype == torch::kFloat ? 4 : 2));
}
void torch_log_probs_fp32(benchmark::State& state) { torch_log_probs(state, torch::kFloat); }
void torch_log_probs_bf16(benchmark::State& state) { torch_log_probs(state, torch::kBFloat16); }

// A group estimator over groups of 16 binary scores, 40% right (bench_advantages.cpp's
// shape): advantages_of(scores viewed as [groups, 16]) -> the flat advantages.
template <class Estimator>
void torch_group_estimator(benchmark::State& state, const Estimator& advantages_of) {
  use_library_threads();
  torch::NoGradGuard no_grad;
  const std::int64_t n = state.range(0);
  torch::manual_seed(7);
  const auto scores = (torch::rand({n}) < 0.4).to(torch::kFloat);
  bench::bandwidth_meter meter(state, bench::limit::copy);
  for (auto _ : state) {
    const auto advantages = advantages_of(scores.view({-1, 16})).view({-1});
    benchmark::DoNotOptimize(advantages.data_ptr());
  }
  meter.report(static_cast<std::size_t>(n) * 2 * sizeof(float));
}

void torch_grpo_advantages_group16(benchmark::State& state) {
  torch_group_estimator(state, [](const torch::Tensor& grouped) {
    const auto mean = grouped.mean(-1, true);
    const auto std = grouped.std(-1, true, true);
    return (grouped - mean) / (std + 1e-6);
  });
}

void torch_rloo_advantages_group16(benchmark::State& state) {
  // veRL compute_rloo_outcome_advantage, vectorised: each score minus the mean of the
  // other members of its group.
  torch_group_estimator(state, [](const torch::Tensor& grouped) {
    return grouped * 16 / 15 - grouped.mean(-1, true) * 16 / 15;
  });
}

void torch_reinforce_plus_plus_advantages_outcome(benchmark::State& state) {
  use_library_threads();
  torch::NoGradGuard no_grad;
  const std::int64_t n = state.range(0), length = 512;
  torch::manual_seed(7);
  auto token_rewards = torch::zeros({n / length, length});
  token_rewards.select(1, length - 1).copy_((torch::rand({n / length}) < 0.4).to(torch::kFloat));
  const auto mask = torch::ones({n / length, length});
  bench::bandwidth_meter meter(state, bench::limit::copy);
  for (auto _ : state) {
    // veRL compute_reinforce_plus_plus_outcome_advantage with gamma 1: the returns as a
    // reversed cumulative sum over each row (veRL loops over the columns; a flipped cumsum
    // is the same sum and faster), then masked_whiten over the batch.
    const auto returns = token_rewards.flip(1).cumsum(1).flip(1) * mask;
    const auto mean = (returns * mask).sum() / mask.sum();
    const auto centered = returns - mean;
    const auto variance = (centered * centered * mask).sum() / (mask.sum() - 1);
    const auto advantages = centered * torch::rsqrt(variance + 1e-8) * mask;
    benchmark::DoNotOptimize(advantages.data_ptr());
  }
  meter.report(static_cast<std::size_t>(n) * 2 * sizeof(float));
}

void torch_gpg_advantages_group16(benchmark::State& state) {
  // veRL compute_gpg_outcome_advantage, vectorised over the groups (f_norm 1): alpha (s -
  // group mean), alpha = batch size / max(non-zero scores, 1). (veRL also takes each
  // group's std, which it never reads.)
  torch_group_estimator(state, [](const torch::Tensor& grouped) {
    const auto alpha = static_cast<double>(grouped.numel()) /
                       torch::count_nonzero(grouped).clamp_min(1).to(torch::kFloat);
    return alpha * (grouped - grouped.mean(-1, true)) / 1.0;
  });
}

void torch_grpo_passk_advantages_group16(benchmark::State& state) {
  // veRL compute_grpo_passk_outcome_advantage, vectorised over the groups: topk(2), the
  // best response gets (r_max - r_second) / (std + eps), the others 0.
  torch_group_estimator(state, [](const torch::Tensor& grouped) {
    const auto top = grouped.topk(2, -1);
    const auto& values = std::get<0>(top);
    const auto& indices = std::get<1>(top);
    const auto advantage =
        (values.select(1, 0) - values.select(1, 1)) / (grouped.std(-1, true, false) + 1e-6);
    return torch::zeros_like(grouped).scatter_(1, indices.narrow(1, 0, 1), advantage.unsqueeze(1));
  });
}

// Token-level batches as bench_advantages.cpp draws them: rows of 512 tokens, groups of 16
// rows (8 at the smoke size), veRL's response_mask (all ones: full rows) beside them.
struct token_rows {
  static constexpr std::int64_t length = 512;
  std::int64_t tokens, rows, group_size;
  torch::Tensor mask;
  explicit token_rows(std::int64_t n)
      : tokens(n),
        rows(n / length),
        group_size(std::min<std::int64_t>(16, n / length)),
        mask(torch::ones({n / length, length})) {}
  // Binary outcomes, 40% right, one per row.
  [[nodiscard]] torch::Tensor outcomes() const {
    return (torch::rand({rows}) < 0.4).to(torch::kFloat);
  }
  // The outcome on each row's last token (veRL's token_level_rewards).
  [[nodiscard]] torch::Tensor outcome_rewards() const {
    auto rewards = torch::zeros({rows, length});
    rewards.select(1, length - 1).copy_(outcomes());
    return rewards;
  }
};

void torch_gae_advantages(benchmark::State& state) {
  use_library_threads();
  torch::NoGradGuard no_grad;
  const token_rows batch(state.range(0));
  torch::manual_seed(7);
  const auto rewards = batch.outcome_rewards();
  const auto values = torch::randn({batch.rows, token_rows::length});
  const auto& mask = batch.mask;
  const double gamma = 1.0, lam = 1.0;
  bench::bandwidth_meter meter(state, bench::limit::copy);
  for (auto _ : state) {
    // veRL compute_gae_advantage_return: its loop over the columns, back to front (for
    // gamma * lambda < 1 there is no cumsum form), then masked_whiten.
    torch::Tensor next_values = torch::zeros({batch.rows}),
                  last_gae_lam = torch::zeros({batch.rows});
    std::vector<torch::Tensor> reversed;
    reversed.reserve(token_rows::length);
    for (std::int64_t t = token_rows::length - 1; t >= 0; --t) {
      const auto m = mask.select(1, t);
      const auto v = values.select(1, t);
      const auto delta = rewards.select(1, t) + gamma * next_values - v;
      const auto gae = delta + gamma * lam * last_gae_lam;
      next_values = v * m + (1 - m) * next_values;
      last_gae_lam = gae * m + (1 - m) * last_gae_lam;
      reversed.push_back(last_gae_lam);
    }
    std::reverse(reversed.begin(), reversed.end());
    const auto advantages = torch::stack(reversed, 1);
    const auto returns = advantages + values;
    const auto whitened = masked_whiten(advantages, mask);
    benchmark::DoNotOptimize(whitened.data_ptr());
    benchmark::DoNotOptimize(returns.data_ptr());
  }
  meter.report(static_cast<std::size_t>(batch.tokens) * 4 * sizeof(float));
}

void torch_remax_advantages(benchmark::State& state) {
  use_library_threads();
  torch::NoGradGuard no_grad;
  const token_rows batch(state.range(0));
  torch::manual_seed(7);
  const auto rewards = batch.outcome_rewards();
  const auto baselines = batch.outcomes();
  const auto& mask = batch.mask;
  bench::bandwidth_meter meter(state, bench::limit::copy);
  for (auto _ : state) {
    // veRL compute_remax_outcome_advantage.
    const auto returns = (rewards * mask).flip({-1}).cumsum(-1).flip({-1});
    const auto advantages = returns - baselines.unsqueeze(-1) * mask;
    benchmark::DoNotOptimize(advantages.data_ptr());
    benchmark::DoNotOptimize(returns.data_ptr());
  }
  meter.report(static_cast<std::size_t>(3 * batch.tokens + batch.rows) * sizeof(float));
}

// A per-row score put on the tokens by a group estimator: advantages_of(batch, scores
// [components, rows]) -> [rows, 512]; the byte count of bench_advantages.cpp's.
template <class Estimator>
void torch_token_group_estimator(benchmark::State& state, std::int64_t components,
                                 const Estimator& advantages_of) {
  use_library_threads();
  torch::NoGradGuard no_grad;
  const token_rows batch(state.range(0));
  torch::manual_seed(7);
  const auto scores = (torch::rand({components, batch.rows}) < 0.4).to(torch::kFloat);
  bench::bandwidth_meter meter(state, bench::limit::copy);
  for (auto _ : state) {
    const auto advantages = advantages_of(batch, scores);
    benchmark::DoNotOptimize(advantages.data_ptr());
  }
  meter.report(static_cast<std::size_t>(batch.tokens + components * batch.rows) * sizeof(float));
}

void torch_opo_advantages_group16(benchmark::State& state) {
  // veRL compute_opo_outcome_advantage, vectorised over the groups: the group's mean
  // score weighted by response length, subtracted, times the mask.
  torch_token_group_estimator(state, 1, [](const token_rows& batch, const torch::Tensor& scores) {
    const auto lengths = batch.mask.sum(-1).view({-1, batch.group_size});
    const auto grouped = scores.view({-1, batch.group_size});
    const auto baseline = (lengths * grouped).sum(-1, true) / lengths.sum(-1, true);
    return (grouped - baseline).view({-1}).unsqueeze(-1) * batch.mask;
  });
}

void torch_reinforce_plus_plus_baseline_advantages_group16(benchmark::State& state) {
  // veRL compute_reinforce_plus_plus_baseline_outcome_advantage, vectorised over the
  // groups: score - group mean, tiled over the row, masked_whiten, times the mask.
  torch_token_group_estimator(state, 1, [](const token_rows& batch, const torch::Tensor& scores) {
    const auto grouped = scores.view({-1, batch.group_size});
    const auto centered = (grouped - grouped.mean(-1, true)).view({-1});
    const auto tiled = centered.unsqueeze(-1).tile({1, token_rows::length}) * batch.mask;
    return masked_whiten(tiled, batch.mask) * batch.mask;
  });
}

void torch_gdpo_advantages_group16_2_components(benchmark::State& state) {
  // veRL compute_gdpo_outcome_advantage with two components of weight 1: GRPO on each
  // (vectorised over the groups, on the tokens as veRL's GRPO returns it), the weighted
  // sum over the tokens, masked_whiten, times the mask.
  torch_token_group_estimator(state, 2, [](const token_rows& batch, const torch::Tensor& scores) {
    const double weights[] = {1.0, 1.0};
    torch::Tensor sum;
    for (std::int64_t k = 0; k < 2; ++k) {
      const auto grouped = scores.select(0, k).view({-1, batch.group_size});
      const auto normalized =
          (grouped - grouped.mean(-1, true)) / (grouped.std(-1, true, true) + 1e-6);
      const auto on_tokens = normalized.view({-1}).unsqueeze(-1) * batch.mask;
      sum = k == 0 ? weights[k] * on_tokens : sum + weights[k] * on_tokens;
    }
    return masked_whiten(sum, batch.mask) * batch.mask;
  });
}

void torch_distillation_advantages(benchmark::State& state) {
  use_library_threads();
  torch::NoGradGuard no_grad;
  const std::int64_t n = state.range(0);
  torch::manual_seed(5);
  const auto teacher = -torch::randn({n / token_rows::length, token_rows::length}).abs();
  const auto student = -torch::randn({n / token_rows::length, token_rows::length}).abs();
  bench::bandwidth_meter meter(state, bench::limit::triad);
  for (auto _ : state) {
    // veRL's on-policy distillation (verl/trainer/distillation/losses.py): the k1
    // kl_penalty of student against teacher, its negation as the advantage.
    const auto losses = student - teacher;
    const auto advantages = -losses;
    benchmark::DoNotOptimize(advantages.data_ptr());
  }
  meter.report(static_cast<std::size_t>(n) * 3 * sizeof(float));
}

void torch_optimal_token_baseline_group16(benchmark::State& state) {
  use_library_threads();
  torch::NoGradGuard no_grad;
  const token_rows batch(state.range(0));
  torch::manual_seed(7);
  const std::int64_t rows = batch.rows, length = token_rows::length, size = batch.group_size;
  const auto rewards = batch.outcome_rewards();
  const auto old_log_probs = -torch::randn({rows, length}).abs();
  const auto p2 = torch::exp(2 * old_log_probs);
  const auto sum_pi_squared = p2 + (1 - p2) * torch::rand({rows, length});
  const auto& mask = batch.mask;
  const auto positions = torch::arange(length).view({1, 1, length});
  bench::bandwidth_meter meter(state, bench::limit::copy);
  for (auto _ : state) {
    // veRL compute_optimal_token_baseline_advantage (no IS weights, handle_zero_tail as
    // the trainer calls it). veRL loops over the groups in Python; with contiguous groups
    // the loop is a view [groups, 16, 512], the same sums.
    const auto returns = (rewards * mask).flip({-1}).cumsum(-1).flip({-1});
    const auto w = 1 - 2 * torch::exp(old_log_probs) + sum_pi_squared;
    const auto w_cumulative = (w * mask).cumsum(-1);
    const auto g_returns = returns.view({-1, size, length});
    const auto g_w = w_cumulative.view({-1, size, length});
    const auto g_mask = mask.view({-1, size, length});
    const auto numerator = (g_returns * g_w * g_mask).sum(1);
    const auto denominator = (g_w * g_mask).sum(1) + 1e-8;
    auto baselines = (numerator / denominator).unsqueeze(1).expand({-1, size, length});
    // handle_zero_tail: the group's unique longest row gets baseline 0 from the
    // second-longest row's length on.
    const auto lengths = g_mask.sum(-1);
    const auto top = std::get<0>(lengths.topk(2, -1));
    const auto longest = top.select(1, 0).unsqueeze(-1), second = top.select(1, 1);
    const auto is_longest = lengths == longest;
    const auto unique = (is_longest.sum(-1) == 1) & (second < longest.squeeze(-1));
    const auto tail =
        (is_longest & unique.unsqueeze(-1)).unsqueeze(-1) & (positions >= second.view({-1, 1, 1}));
    baselines = baselines.masked_fill(tail, 0.0);
    const auto advantages = (returns - baselines.reshape({rows, length})) * mask;
    benchmark::DoNotOptimize(advantages.data_ptr());
    benchmark::DoNotOptimize(returns.data_ptr());
  }
  meter.report(static_cast<std::size_t>(batch.tokens) * 5 * sizeof(float));
}

enum class kl_kind { k1, abs, k2, k3 };

struct token_tensors {
  torch::Tensor log_probs, old_log_probs, advantages;
  explicit token_tensors(std::int64_t n) {
    torch::manual_seed(11);
    log_probs = -torch::randn({n}).abs();
    old_log_probs = log_probs + 0.1 * torch::randn({n});
    advantages = torch::randn({n});
    log_probs.requires_grad_(true);
  }
};

void torch_reinforce_loss_token_mean(benchmark::State& state) {
  use_library_threads();
  token_tensors x(state.range(0));
  bench::bandwidth_meter meter(state, bench::limit::triad);
  for (auto _ : state) {
    const auto ratio = torch::exp(x.log_probs - x.log_probs.detach());
    const auto loss = (-x.advantages * ratio).mean();
    loss.backward();
    benchmark::DoNotOptimize(x.log_probs.grad().data_ptr());
    x.log_probs.mutable_grad() = torch::Tensor();
  }
  meter.report(static_cast<std::size_t>(state.range(0)) * 3 * sizeof(float));
}

void torch_ppo_clip_loss_token_mean(benchmark::State& state) {
  use_library_threads();
  token_tensors x(state.range(0));
  bench::bandwidth_meter meter(state, bench::limit::triad);
  for (auto _ : state) {
    // veRL compute_policy_loss_vanilla with clip-higher and dual clip, token-mean.
    const auto negative_approx_kl = torch::clamp(x.log_probs - x.old_log_probs, -20.0, 20.0);
    const auto ratio = torch::exp(negative_approx_kl);
    const auto pg_losses1 = -x.advantages * ratio;
    const auto pg_losses2 = -x.advantages * torch::clamp(ratio, 1 - 0.2, 1 + 0.28);
    const auto clip_pg_losses1 = torch::maximum(pg_losses1, pg_losses2);
    const auto pg_losses3 = -x.advantages * 3.0;
    const auto clip_pg_losses2 = torch::min(pg_losses3, clip_pg_losses1);
    const auto pg_losses = torch::where(x.advantages < 0, clip_pg_losses2, clip_pg_losses1);
    const auto loss = pg_losses.mean();
    loss.backward();
    benchmark::DoNotOptimize(x.log_probs.grad().data_ptr());
    x.log_probs.mutable_grad() = torch::Tensor();
  }
  meter.report(static_cast<std::size_t>(state.range(0)) * 4 * sizeof(float));
}

void torch_cispo_loss_token_mean(benchmark::State& state) {
  use_library_threads();
  token_tensors x(state.range(0));
  bench::bandwidth_meter meter(state, bench::limit::triad);
  for (auto _ : state) {
    // veRL compute_policy_loss_cispo, token-mean: a stop-gradient clipped ratio times A
    // times the log-prob.
    const auto ratio = torch::exp(torch::clamp(x.log_probs - x.old_log_probs, -20.0, 20.0));
    const auto weight = torch::clamp(ratio, 1 - 0.2, 1 + 0.28).detach();
    const auto loss = (-x.advantages * weight * x.log_probs).mean();
    loss.backward();
    benchmark::DoNotOptimize(x.log_probs.grad().data_ptr());
    x.log_probs.mutable_grad() = torch::Tensor();
  }
  meter.report(static_cast<std::size_t>(state.range(0)) * 4 * sizeof(float));
}

// A ratio loss as veRL writes it: loss_of(x) gives the token losses (or the row losses,
// for the sequence losses on full 512-token rows, where every aggregation is the plain
// mean), their mean is the loss, autograd gives dL/dlogp; the options are the ones
// bench_policy_loss.cpp gives cascade_rl's (veRL's defaults).
// bytes_per_token: what the matching cascade_rl benchmark counts (four arrays of floats
// for the ratio losses), so that the two bandwidths divide into a speed-up.
template <class Loss>
void torch_ratio_loss(benchmark::State& state, const Loss& loss_of,
                      std::size_t bytes_per_token = 4 * sizeof(float)) {
  use_library_threads();
  token_tensors x(state.range(0));
  bench::bandwidth_meter meter(state, bench::limit::triad);
  for (auto _ : state) {
    const auto loss = loss_of(x).mean();
    loss.backward();
    benchmark::DoNotOptimize(x.log_probs.grad().data_ptr());
    x.log_probs.mutable_grad() = torch::Tensor();
  }
  meter.report(static_cast<std::size_t>(state.range(0)) * bytes_per_token);
}

void torch_gspo_loss_seq_mean_token_mean(benchmark::State& state) {
  // veRL compute_policy_loss_gspo on full rows of 512 tokens: the sequence's mean
  // log-ratio, the token ratio with stop-gradients where veRL places them, clipped,
  // seq-mean-token-mean.
  torch_ratio_loss(state, [](const token_tensors& x) {
    const std::int64_t length = 512;  // bench_policy_loss.cpp's sequences
    const auto log_probs = x.log_probs.view({-1, length});
    const auto log_ratio = log_probs - x.old_log_probs.view({-1, length});
    const auto sequence = log_ratio.mean(1, /*keepdim=*/true);
    const auto token = log_probs - log_probs.detach() + sequence.detach();
    const auto ratio = torch::exp(torch::clamp_max(token, 10.0));
    const auto advantages = x.advantages.view({-1, length});
    return torch::maximum(-advantages * ratio,
                          -advantages * torch::clamp(ratio, 1 - 0.0003, 1 + 0.0004));
  });
}

void torch_sapo_loss_token_mean(benchmark::State& state) {
  // veRL compute_policy_loss_sapo: the soft gate sigmoid(tau (r - 1)) * 4 / tau, tau 1.0
  // for positive advantages and 1.05 for the rest.
  torch_ratio_loss(state, [](const token_tensors& x) {
    const auto ratio = torch::exp(torch::clamp(x.log_probs - x.old_log_probs, -20.0, 20.0));
    const auto tau = torch::where(x.advantages > 0, torch::full_like(x.advantages, 1.0),
                                  torch::full_like(x.advantages, 1.05));
    const auto gate = torch::sigmoid(tau * (ratio - 1)) * (4.0 / tau);
    return -gate * x.advantages;
  });
}

// veRL compute_policy_loss_dppo_tv / _kl: -A sg(min(r, 20)) logp where the token's
// divergence from the old policy is within 0.2 on its advantage's side, else 0.
torch::Tensor torch_dppo_losses(const token_tensors& x, bool binary_kl) {
  const auto ratio = torch::exp(torch::clamp(x.log_probs - x.old_log_probs, -20.0, 20.0));
  const auto prob = torch::exp(x.log_probs);
  const auto old_prob = torch::exp(x.old_log_probs);
  torch::Tensor valid_positive, valid_negative;
  if (binary_kl) {
    const auto kl = old_prob * (x.old_log_probs - x.log_probs) +
                    (1 - old_prob) * torch::log((1 - old_prob + 1e-8) / (1 - prob + 1e-8));
    valid_positive = (kl <= 0.2) | (prob <= old_prob);
    valid_negative = (kl <= 0.2) | (prob >= old_prob);
  } else {
    valid_positive = (prob - old_prob) <= 0.2;
    valid_negative = (prob - old_prob) >= -0.2;
  }
  const auto mask = torch::where(x.advantages > 0, valid_positive, valid_negative).detach();
  const auto weight = torch::clamp_max(ratio, 20.0).detach();
  return -x.advantages * weight * x.log_probs * mask.to(torch::kFloat);
}

void torch_dppo_tv_loss_token_mean(benchmark::State& state) {
  torch_ratio_loss(state, [](const token_tensors& x) { return torch_dppo_losses(x, false); });
}

void torch_dppo_kl_loss_token_mean(benchmark::State& state) {
  torch_ratio_loss(state, [](const token_tensors& x) { return torch_dppo_losses(x, true); });
}

void torch_dro_loss_token_mean(benchmark::State& state) {
  // veRL compute_policy_loss_dro: -(logp A - beta / 2 (logp - old_logp)^2), beta 1e-3.
  torch_ratio_loss(state, [](const token_tensors& x) {
    const auto log_ratio = x.log_probs - x.old_log_probs;
    return -(x.log_probs * x.advantages - 0.5e-3 * log_ratio * log_ratio);
  });
}

void torch_geo_mean_loss_seq_mean_token_mean(benchmark::State& state) {
  // veRL compute_policy_loss_geo_mean on full rows: the log-ratio clipped by the sign of
  // the advantage (0.2 both ways), the sequence's mean of it exponentiated, times the
  // sequence's mean advantage; the mean over rows.
  torch_ratio_loss(state, [](const token_tensors& x) {
    const std::int64_t length = 512;  // bench_policy_loss.cpp's sequences
    const auto log_ratio = x.log_probs.view({-1, length}) - x.old_log_probs.view({-1, length});
    const auto advantages = x.advantages.view({-1, length});
    const auto sign = torch::sign(advantages);
    const auto clipped = torch::where(
        sign > 0, torch::clamp_max(log_ratio, 0.2),
        torch::where(sign < 0, torch::clamp_min(log_ratio, -0.2), torch::zeros_like(log_ratio)));
    return -advantages.mean(1) * torch::exp(clipped.mean(1));
  });
}

// veRL kl_penalty (core_algos.kl_penalty_forward) as its KL loss, token-mean, dL/dlogp by
// autograd; ref is the reference policy's log-probs.
torch::Tensor torch_kl_penalty(const token_tensors& x, kl_kind kind) {
  const auto& logprob = x.log_probs;
  const auto& ref_logprob = x.old_log_probs;
  switch (kind) {
    case kl_kind::k1:
      return logprob - ref_logprob;
    case kl_kind::abs:
      return (logprob - ref_logprob).abs();
    case kl_kind::k2:
      return 0.5 * (logprob - ref_logprob).square();
    case kl_kind::k3:
      break;
  }
  // "low_var_kl": kl = ref - logp clamped to +-20, exp(kl) - kl - 1 clamped to +-10.
  const auto kl = torch::clamp(ref_logprob - logprob, -20.0, 20.0);
  return torch::clamp(torch::exp(kl) - kl - 1, -10.0, 10.0);
}

void torch_kl_loss_token_mean(benchmark::State& state, kl_kind kind) {
  torch_ratio_loss(
      state, [kind](const token_tensors& x) { return torch_kl_penalty(x, kind); },
      3 * sizeof(float));
}

void torch_kl_loss_k3_token_mean(benchmark::State& state) {
  torch_kl_loss_token_mean(state, kl_kind::k3);
}
void torch_kl_loss_k1_token_mean(benchmark::State& state) {
  torch_kl_loss_token_mean(state, kl_kind::k1);
}
void torch_kl_loss_abs_token_mean(benchmark::State& state) {
  torch_kl_loss_token_mean(state, kl_kind::abs);
}
void torch_kl_loss_k2_token_mean(benchmark::State& state) {
  torch_kl_loss_token_mean(state, kl_kind::k2);
}

void torch_entropy_loss_token_mean(benchmark::State& state) {
  use_library_threads();
  torch::manual_seed(11);
  auto entropy = torch::randn({state.range(0)}).abs();
  entropy.requires_grad_(true);
  bench::bandwidth_meter meter(state, bench::limit::copy);
  for (auto _ : state) {
    // veRL's entropy bonus: -coefficient * agg_loss(entropy, token-mean).
    const auto loss = -(-1e-3) * entropy.mean();
    loss.backward();
    benchmark::DoNotOptimize(entropy.grad().data_ptr());
    entropy.mutable_grad() = torch::Tensor();
  }
  meter.report(static_cast<std::size_t>(state.range(0)) * 2 * sizeof(float));
}

// veRL rollout_corr_helper on full rows of 512 tokens (bench_policy_loss.cpp's sequences),
// under no_grad as veRL computes it: sequence-level weights truncated at 2, the
// seq_mean_k3 rejection at 0.01, and the main diagnostics (the weights' mean, max, min,
// std and ESS, the rejected fraction, the two log-perplexities, k3 KL, chi2).
struct torch_correction {
  torch::Tensor weights, keep, diagnostics;
};

torch_correction torch_sequence_is_seq_mean_k3(const torch::Tensor& log_probs,
                                               const torch::Tensor& rollout_log_probs) {
  const std::int64_t length = 512;
  const auto log_ratio =
      torch::clamp(log_probs - rollout_log_probs, -20.0, 20.0).view({-1, length});
  const auto sequence_weight = torch::exp(torch::clamp(log_ratio.sum(1), -20.0, 20.0));
  const auto weights = torch::clamp_max(sequence_weight, 2.0).unsqueeze(1).expand({-1, length});
  const auto k3 = torch::exp(log_ratio) - 1 - log_ratio;
  const auto keep = (k3.mean(1) <= 0.01).unsqueeze(1).expand({-1, length});
  const auto mean = weights.mean();
  const auto diagnostics =
      torch::stack({mean, weights.max(), weights.min(), weights.std(),
                    1.0 / (weights.pow(2).mean() / (mean * mean)),
                    1.0 - keep.to(torch::kFloat).mean(), -log_probs.mean(),
                    -rollout_log_probs.mean(), k3.mean(), (torch::exp(2 * log_ratio).mean() - 1)});
  return {weights, keep, diagnostics};
}

void torch_rollout_correction_sequence_is_seq_mean_k3(benchmark::State& state) {
  use_library_threads();
  torch::NoGradGuard no_grad;  // veRL computes the correction under no_grad
  token_tensors x(state.range(0));
  bench::bandwidth_meter meter(state, bench::limit::triad);
  for (auto _ : state) {
    const torch_correction c = torch_sequence_is_seq_mean_k3(x.log_probs.detach(), x.old_log_probs);
    benchmark::DoNotOptimize(c.weights.contiguous().data_ptr());
    benchmark::DoNotOptimize(c.keep.contiguous().data_ptr());
    benchmark::DoNotOptimize(c.diagnostics.data_ptr());
  }
  meter.report(static_cast<std::size_t>(state.range(0)) * (3 * sizeof(float) + 1));
}

void torch_bypass_mode_ppo_clip_token_mean(benchmark::State& state) {
  use_library_threads();
  token_tensors x(state.range(0));
  const std::int64_t length = 512;
  bench::bandwidth_meter meter(state, bench::limit::triad);
  for (auto _ : state) {
    // veRL compute_policy_loss_bypass_mode, loss_type ppo_clip: the correction under
    // no_grad, then compute_policy_loss_vanilla (clip 0.2 / 0.28, clip_ratio_c 3) against
    // the rollout log-probs on the rejection-masked tokens, with its three metrics.
    torch_correction c;
    {
      torch::NoGradGuard no_grad;
      c = torch_sequence_is_seq_mean_k3(x.log_probs.detach(), x.old_log_probs);
    }
    const auto mask = c.keep.to(torch::kFloat);  // response_mask * the rejection's mask
    const auto log_prob = x.log_probs.view({-1, length});
    const auto advantages = x.advantages.view({-1, length});
    const auto negative_approx_kl =
        torch::clamp(log_prob - x.old_log_probs.view({-1, length}), -20.0, 20.0);
    const auto ratio = torch::exp(negative_approx_kl);
    const auto ppo_kl = masked_mean(-negative_approx_kl, mask);
    const auto pg_losses1 = -advantages * ratio;
    const auto pg_losses2 = -advantages * torch::clamp(ratio, 1 - 0.2, 1 + 0.28);
    const auto clip_pg_losses1 = torch::maximum(pg_losses1, pg_losses2);
    const auto pg_clipfrac = masked_mean(torch::gt(pg_losses2, pg_losses1).to(torch::kFloat), mask);
    const auto pg_losses3 = -advantages * 3.0;
    const auto clip_pg_losses2 = torch::min(pg_losses3, clip_pg_losses1);
    const auto pg_clipfrac_lower = masked_mean(
        torch::gt(clip_pg_losses1, pg_losses3) * (advantages < 0).to(torch::kFloat), mask);
    const auto pg_losses = torch::where(advantages < 0, clip_pg_losses2, clip_pg_losses1);
    const auto loss = masked_sum(pg_losses, mask) / mask.sum();
    loss.backward();
    const double metrics =
        pg_clipfrac.item<double>() + ppo_kl.item<double>() + pg_clipfrac_lower.item<double>();
    benchmark::DoNotOptimize(metrics);
    benchmark::DoNotOptimize(c.weights.contiguous().data_ptr());
    benchmark::DoNotOptimize(c.diagnostics.data_ptr());
    benchmark::DoNotOptimize(x.log_probs.grad().data_ptr());
    x.log_probs.mutable_grad() = torch::Tensor();
  }
  meter.report(static_cast<std::size_t>(state.range(0)) * (5 * sizeof(float) + 1));
}

// veRL compute_policy_loss_clip_cov with actor.yaml's settings (clip 0.2 both ways,
// clip_cov_ratio 2e-4, covariance in (1, 5)), token-mean, with its two metrics.
void torch_clip_cov_loss_token_mean(benchmark::State& state) {
  use_library_threads();
  token_tensors x(state.range(0));
  const std::int64_t length = 512;
  const auto response_mask = torch::ones({state.range(0) / length, length});
  const double infinity = std::numeric_limits<double>::infinity();
  bench::bandwidth_meter meter(state, bench::limit::triad);
  for (auto _ : state) {
    const auto log_prob = x.log_probs.view({-1, length});
    const auto advantages = x.advantages.view({-1, length});
    const auto negative_approx_kl = log_prob - x.old_log_probs.view({-1, length});
    const auto ratio = torch::exp(negative_approx_kl);
    const auto ppo_kl = masked_mean(-negative_approx_kl, response_mask);
    const auto pg_losses1 = -advantages * ratio;
    auto corr = torch::ones_like(advantages);
    const auto pg_losses2 = -advantages * torch::clamp(ratio, 1 - 0.2, 1 + 0.2);
    const auto clip_by_origin = (pg_losses2 > pg_losses1) & (response_mask > 0);
    auto cov_all = (advantages - masked_mean(advantages, response_mask)) *
                   (log_prob - masked_mean(log_prob.detach(), response_mask));
    cov_all.index_put_({response_mask == 0}, -infinity);
    cov_all.index_put_({clip_by_origin}, -infinity);
    const auto clip_num = std::max<std::int64_t>(
        static_cast<std::int64_t>(0.0002 * response_mask.sum().item<double>()), 1);
    auto top_k_idx = torch::nonzero((cov_all < 5.0) & (cov_all > 1.0) & (response_mask > 0));
    if (top_k_idx.size(0) > 0) {
      const auto perm = torch::randperm(top_k_idx.size(0));
      top_k_idx = top_k_idx.index({perm.slice(0, 0, std::min(clip_num, top_k_idx.size(0)))});
    }
    corr.index_put_({top_k_idx.select(1, 0), top_k_idx.select(1, 1)}, 0.0);
    const auto pg_clipfrac = masked_mean((corr == 0).to(torch::kFloat), response_mask);
    const auto pg_losses = torch::maximum(pg_losses1, pg_losses2) * corr;
    const auto loss = masked_sum(pg_losses, response_mask) / response_mask.sum();
    loss.backward();
    const double metrics = pg_clipfrac.item<double>() + ppo_kl.item<double>();
    benchmark::DoNotOptimize(metrics);
    benchmark::DoNotOptimize(x.log_probs.grad().data_ptr());
    x.log_probs.mutable_grad() = torch::Tensor();
  }
  meter.report(static_cast<std::size_t>(state.range(0)) * 4 * sizeof(float));
}

// veRL compute_policy_loss_kl_cov with actor.yaml's settings (kl_cov_ratio 2e-4,
// ppo_kl_coef 0.1), token-mean, with its metric.
void torch_kl_cov_loss_token_mean(benchmark::State& state) {
  use_library_threads();
  token_tensors x(state.range(0));
  const std::int64_t length = 512;
  const auto response_mask = torch::ones({state.range(0) / length, length});
  bench::bandwidth_meter meter(state, bench::limit::triad);
  for (auto _ : state) {
    const auto log_prob = x.log_probs.view({-1, length});
    const auto advantages = x.advantages.view({-1, length});
    const auto negative_approx_kl = log_prob - x.old_log_probs.view({-1, length});
    const auto abs_kl = negative_approx_kl.abs();
    const auto ratio = torch::exp(negative_approx_kl);
    const auto ppo_kl_abs = masked_mean(negative_approx_kl.abs(), response_mask);
    auto pg_losses1 = -advantages * ratio;
    const auto pg_losses_kl = -advantages * ratio + 0.1 * abs_kl;
    auto pg_losses = pg_losses1;
    const auto all_valid = response_mask > 0;
    const auto all_valid_idx = torch::nonzero(all_valid.reshape({-1})).select(1, 0);
    const auto all_valid_adv = advantages.index({all_valid}).detach().reshape({-1});
    const auto all_valid_logp = log_prob.index({all_valid}).detach().reshape({-1});
    const auto valid = all_valid_adv.size(0);
    if (valid != 0) {
      const auto cov_lst_all =
          (all_valid_adv - all_valid_adv.mean()) * (all_valid_logp - all_valid_logp.mean());
      const auto k_percent_nums =
          std::max<std::int64_t>(1, static_cast<std::int64_t>(static_cast<double>(valid) * 0.0002));
      auto large_cov_idxs = std::get<1>(torch::topk(cov_lst_all, k_percent_nums, -1, true));
      if (large_cov_idxs.size(0) != 0) {
        large_cov_idxs = all_valid_idx.index({large_cov_idxs});
        const auto rows = large_cov_idxs.div(length, "floor");
        const auto columns = large_cov_idxs.remainder(length);
        pg_losses.index_put_({rows, columns}, pg_losses_kl.index({rows, columns}));
      }
    }
    const auto loss = masked_sum(pg_losses, response_mask) / response_mask.sum();
    loss.backward();
    const double metric = ppo_kl_abs.item<double>();
    benchmark::DoNotOptimize(metric);
    benchmark::DoNotOptimize(x.log_probs.grad().data_ptr());
    x.log_probs.mutable_grad() = torch::Tensor();
  }
  meter.report(static_cast<std::size_t>(state.range(0)) * 4 * sizeof(float));
}

}  // namespace

BENCHMARK(torch_rollout_correction_sequence_is_seq_mean_k3)
    ->Arg(4096)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime();
BENCHMARK(torch_cispo_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_sapo_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_dppo_tv_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_dppo_kl_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_dro_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_geo_mean_loss_seq_mean_token_mean)
    ->Arg(4096)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime();
BENCHMARK(torch_gspo_loss_seq_mean_token_mean)
    ->Arg(4096)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime();
BENCHMARK(torch_log_probs_fp32)->Arg(4096)->Arg(32768)->Arg(131072)->Arg(262144)->UseRealTime();
BENCHMARK(torch_log_probs_bf16)->Arg(4096)->Arg(32768)->Arg(131072)->Arg(262144)->UseRealTime();
BENCHMARK(torch_grpo_advantages_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_rloo_advantages_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_reinforce_plus_plus_advantages_outcome)
    ->Arg(4096)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime();
BENCHMARK(torch_kl_loss_k3_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_entropy_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_reinforce_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_ppo_clip_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_kl_loss_k1_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_kl_loss_abs_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_kl_loss_k2_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_clip_cov_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_kl_cov_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_bypass_mode_ppo_clip_token_mean)
    ->Arg(4096)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime();
BENCHMARK(torch_gpg_advantages_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_grpo_passk_advantages_group16)
    ->Arg(4096)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime();
BENCHMARK(torch_gae_advantages)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_remax_advantages)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_opo_advantages_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_reinforce_plus_plus_baseline_advantages_group16)
    ->Arg(4096)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime();
BENCHMARK(torch_gdpo_advantages_group16_2_components)
    ->Arg(4096)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime();
BENCHMARK(torch_distillation_advantages)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_optimal_token_baseline_group16)
    ->Arg(4096)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime();
