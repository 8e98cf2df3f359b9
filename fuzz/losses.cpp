// The loss entry points (REINFORCE with each surrogate and importance mode, PPO clip
// with clip-higher and dual clip, every aggregation) and log_probs_from_logits on
// arbitrary floats and shapes: refuse with cascade_rl::error, or return without a
// sanitizer report; sequential and parallel results agree bit for bit.
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "cascade_rl/cascade_rl.hpp"
#include "fuzz_input.hpp"

namespace cr = cascade_rl;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cr::fuzz::input in{data, size};
  const std::uint8_t bits = in.byte(), bits2 = in.byte();
  const std::size_t sequences = in.byte() % 9;
  std::vector<std::int64_t> offsets{0};
  for (std::size_t s = 0; s < sequences; ++s) offsets.push_back(offsets.back() + in.byte() % 9 - ((bits2 & 128) ? 1 : 0));
  const std::size_t tokens = static_cast<std::size_t>(std::max<std::int64_t>(offsets.back(), 0));
  std::vector<std::uint8_t> mask;
  if (bits & 1)
    for (std::size_t t = 0; t < tokens + ((bits2 & 64) ? 1 : 0); ++t) mask.push_back(in.byte() & 1);
  const auto floats = [&](std::size_t k) {
    std::vector<float> v;
    for (std::size_t i = 0; i < k; ++i) v.push_back(in.take<float>());
    return v;
  };
  const std::size_t extra = (bits2 & 32) ? 1 : 0;
  const auto logp = floats(tokens), old_logp = floats(tokens + extra), adv = floats(tokens), behaviour = floats(tokens);
  const double norm_values[] = {0, 1, 7.5, -1, 1e-300, 1e300};
  const auto aggregation = static_cast<cr::loss_aggregation>((bits >> 1) % 5);
  // Mostly made for the losses' mode; one input in eight brings a normaliser of another.
  const auto normalizer_mode =
      (bits2 & 0xE0) == 0 ? static_cast<cr::loss_aggregation>((bits >> 2) % 5) : aggregation;
  const cr::loss_normalizer norm{.mode = normalizer_mode,
                                 .tokens = norm_values[bits2 % 6],
                                 .sequences = norm_values[(bits2 >> 3) % 4],
                                 .scale = norm_values[(bits >> 5) % 6]};
  const cr::importance_options importance{.mode = static_cast<cr::importance_sampling>((bits >> 4) % 3),
                                          .cap = in.take<float>(), .band_low = 0.5, .band_high = 2.0};
  try {
    const cr::token_layout layout(offsets, mask);
    std::vector<float> g1(tokens), g2(tokens);
    const cr::reinforce_options ro{.aggregation = aggregation,
                                   .surrogate = (bits & 8) ? cr::reinforce_surrogate::log_prob : cr::reinforce_surrogate::ratio,
                                   .importance = importance};
    const auto r1 = cr::reinforce_loss(
        cr::exec::seq, layout,
        {.log_probs = logp, .advantages = adv, .behaviour_log_probs = behaviour}, g1, norm, ro);
    const auto r2 = cr::reinforce_loss(
        cr::exec::par, layout,
        {.log_probs = logp, .advantages = adv, .behaviour_log_probs = behaviour}, g2, norm, ro);
    if (!g1.empty() && std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)) != 0) __builtin_trap();
    (void)r1;
    (void)r2;
  } catch (const cr::error&) {
  }
  try {
    const cr::token_layout layout(offsets, mask);
    std::vector<float> g(tokens);
    const cr::ppo_clip_options po{.clip_low = (bits2 & 1) ? 0.2 : 1.5,
                                  .clip_high = 0.28,
                                  .dual_clip = (bits2 & 2) ? std::optional<double>(3.0) : std::nullopt,
                                  .log_ratio_clamp = (bits2 & 4) ? 20.0 : 0.0,
                                  .aggregation = aggregation,
                                  .importance = importance};
    cr::ppo_clip_loss(cr::exec::par, layout,
                      {.log_probs = logp,
                       .old_log_probs = old_logp,
                       .advantages = adv,
                       .behaviour_log_probs = behaviour},
                      g, norm, po);
  } catch (const cr::error&) {
  }
  try {
    const std::size_t vocab = in.byte() % 40, step = in.byte() % 3, rows = in.byte() % 5;
    const std::size_t stride = vocab + step > 0 ? vocab + step - 1 : 0;  // may be vocab - 1: refused
    const auto logits = floats(rows * std::max<std::size_t>(stride, 1));
    std::vector<std::int64_t> labels;
    for (std::size_t r = 0; r < rows; ++r) labels.push_back(static_cast<std::int64_t>(in.take<std::int8_t>()));
    std::vector<float> lp(rows), ent((bits & 128) ? rows : 0);
    const float temperatures[] = {1.0f, 0.5f, 0.0f, -1.0f, 1e-30f, 1e30f};
    cr::log_probs_from_logits(cr::exec::seq, {.vocab = vocab, .row_stride = stride}, logits,
                              std::span<const std::int64_t>(labels), std::span<float>(lp),
                              std::span<float>(ent), temperatures[in.byte() % 6]);
  } catch (const cr::error&) {
  }
  return 0;
}
