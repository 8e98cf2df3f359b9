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

void torch_grpo_advantages_group16(benchmark::State& state) {
  use_library_threads();
  torch::NoGradGuard no_grad;
  const std::int64_t n = state.range(0);
  torch::manual_seed(7);
  const auto scores = (torch::rand({n}) < 0.4).to(torch::kFloat);
  bench::bandwidth_meter meter(state, bench::limit::copy);
  for (auto _ : state) {
    const auto grouped = scores.view({-1, 16});
    const auto mean = grouped.mean(-1, true);
    const auto std = grouped.std(-1, true, true);
    const auto advantages = ((grouped - mean) / (std + 1e-6)).view({-1});
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

void torch_gspo_loss_seq_mean_token_mean(benchmark::State& state) {
  use_library_threads();
  token_tensors x(state.range(0));
  bench::bandwidth_meter meter(state, bench::limit::triad);
  const std::int64_t length = 512;  // bench_policy_loss.cpp's sequences
  for (auto _ : state) {
    // veRL compute_policy_loss_gspo on full rows of 512 tokens: the sequence's mean
    // log-ratio, the token ratio with stop-gradients where veRL places them, clipped,
    // seq-mean-token-mean.
    const auto log_probs = x.log_probs.view({-1, length});
    const auto log_ratio = log_probs - x.old_log_probs.view({-1, length});
    const auto sequence = log_ratio.mean(1, /*keepdim=*/true);
    const auto token = log_probs - log_probs.detach() + sequence.detach();
    const auto ratio = torch::exp(torch::clamp_max(token, 10.0));
    const auto advantages = x.advantages.view({-1, length});
    const auto losses = torch::maximum(-advantages * ratio,
                                       -advantages * torch::clamp(ratio, 1 - 0.0003, 1 + 0.0004));
    const auto loss = losses.mean(1).mean();
    loss.backward();
    benchmark::DoNotOptimize(x.log_probs.grad().data_ptr());
    x.log_probs.mutable_grad() = torch::Tensor();
  }
  meter.report(static_cast<std::size_t>(state.range(0)) * 4 * sizeof(float));
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
BENCHMARK(torch_gspo_loss_seq_mean_token_mean)
    ->Arg(4096)
    ->Arg(1 << 20)
    ->Arg(1 << 24)
    ->UseRealTime();
BENCHMARK(torch_log_probs_fp32)->Arg(4096)->Arg(32768)->Arg(131072)->Arg(262144)->UseRealTime();
BENCHMARK(torch_log_probs_bf16)->Arg(4096)->Arg(32768)->Arg(131072)->Arg(262144)->UseRealTime();
BENCHMARK(torch_grpo_advantages_group16)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_reinforce_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
BENCHMARK(torch_ppo_clip_loss_token_mean)->Arg(4096)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();
