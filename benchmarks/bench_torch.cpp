// libtorch renderings of the kernels, written the way Python trainers write them
// (veRL-style: log_softmax + gather, the group view with mean/std, the clipped loss with
// autograd for dL/dlogp), at exec::par's thread count, on the same sizes and with the
// same byte counts as the cascade_rl benchmarks, so that scripts/bench_table.py can
// divide one by the other. Built only when find_package(Torch) succeeds.

#include <benchmark/benchmark.h>

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>

#include "bandwidth.hpp"

namespace {

namespace bench = cascade_rl::bench;

void use_library_threads() {
  at::set_num_threads(cascade_rl::detail::thread_count(cascade_rl::exec::par));
}

std::int64_t rows_for(std::int64_t vocab) { return vocab <= 4096 ? 64 : (std::int64_t{32} << 20) / vocab; }

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

void torch_kl_loss_k3_token_mean(benchmark::State& state) {
  // veRL kl_penalty "low_var_kl": kl = ref - logp clamped to +-20, exp(kl) - kl - 1
  // clamped to +-10, token-mean, dL/dlogp by autograd.
  torch_ratio_loss(
      state,
      [](const token_tensors& x) {
        const auto kl = torch::clamp(x.old_log_probs - x.log_probs, -20.0, 20.0);
        return torch::clamp(torch::exp(kl) - kl - 1, -10.0, 10.0);
      },
      3 * sizeof(float));
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

void torch_rollout_correction_sequence_is_seq_mean_k3(benchmark::State& state) {
  use_library_threads();
  torch::NoGradGuard no_grad;  // veRL computes the correction under no_grad
  token_tensors x(state.range(0));
  bench::bandwidth_meter meter(state, bench::limit::triad);
  const std::int64_t length = 512;  // bench_policy_loss.cpp's sequences
  for (auto _ : state) {
    // veRL rollout_corr_helper on full rows: sequence-level weights truncated at 2, the
    // seq_mean_k3 rejection at 0.01, and the main diagnostics (the weights' mean, max,
    // min, std and ESS, the rejected fraction, the two log-perplexities, k3 KL, chi2).
    const auto log_ratio =
        torch::clamp(x.log_probs.detach() - x.old_log_probs, -20.0, 20.0).view({-1, length});
    const auto sequence_weight = torch::exp(torch::clamp(log_ratio.sum(1), -20.0, 20.0));
    const auto weights = torch::clamp_max(sequence_weight, 2.0).unsqueeze(1).expand({-1, length});
    const auto k3 = torch::exp(log_ratio) - 1 - log_ratio;
    const auto keep = (k3.mean(1) <= 0.01).unsqueeze(1).expand({-1, length});
    const auto mean = weights.mean();
    const auto diagnostics =
        torch::stack({mean, weights.max(), weights.min(), weights.std(),
                      1.0 / (weights.pow(2).mean() / (mean * mean)),
                      1.0 - keep.to(torch::kFloat).mean(), -x.log_probs.detach().mean(),
                      -x.old_log_probs.mean(), k3.mean(), (torch::exp(2 * log_ratio).mean() - 1)});
    benchmark::DoNotOptimize(weights.contiguous().data_ptr());
    benchmark::DoNotOptimize(keep.contiguous().data_ptr());
    benchmark::DoNotOptimize(diagnostics.data_ptr());
  }
  meter.report(static_cast<std::size_t>(state.range(0)) * (3 * sizeof(float) + 1));
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
