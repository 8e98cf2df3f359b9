#pragma once
// A rollout batch: what Policy::generate returns and every later phase reads. Ragged
// like the core layouts: group g (prompt g) owns responses [group_offsets[g],
// group_offsets[g+1]), response i owns tokens [token_offsets[i], token_offsets[i+1]).
// After filtering, groups may be smaller than the requested group size.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cascade_rl/algorithms/group_filters.hpp"
#include "cascade_rl/cascade/episode_summary.hpp"
#include "cascade_rl/cascade/prompt.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/group_layout.hpp"
#include "cascade_rl/core/token_layout.hpp"

namespace cascade_rl {

struct rollout_batch {
  std::vector<prompt> prompts{};                 // one per group
  std::vector<std::int64_t> group_offsets{0};   // responses of each prompt
  std::vector<std::int64_t> token_offsets{0};   // tokens of each response (cu_seqlens)
  std::vector<std::int32_t> tokens{};            // sampled token ids
  std::vector<float> behaviour_log_probs{};      // the sampler's log-prob of each token
  std::vector<std::uint8_t> loss_mask{};         // empty, or one per token (0: excluded)
  std::vector<finish_reason> finish_reasons{};   // one per response
  std::vector<std::string> texts{};              // one per response (may be empty strings)
  std::vector<episode_summary> episodes{};       // agentic stages: one per response; else empty

  // Building: add_prompt, then its responses.
  void add_prompt(prompt p) {
    prompts.push_back(std::move(p));
    group_offsets.push_back(group_offsets.back());
  }
  void add_response(std::span<const std::int32_t> response_tokens,
                    std::span<const float> log_probs, finish_reason finish,
                    std::string text = {}) {
    if (prompts.empty()) detail::fail("rollout_batch.add_response", "called before add_prompt");
    if (log_probs.size() != response_tokens.size())
      detail::fail("rollout_batch.add_response",
                   "has " + std::to_string(log_probs.size()) + " log-probs for " +
                       std::to_string(response_tokens.size()) + " tokens");
    tokens.insert(tokens.end(), response_tokens.begin(), response_tokens.end());
    behaviour_log_probs.insert(behaviour_log_probs.end(), log_probs.begin(), log_probs.end());
    token_offsets.push_back(static_cast<std::int64_t>(tokens.size()));
    finish_reasons.push_back(finish);
    texts.push_back(std::move(text));
    ++group_offsets.back();
  }

  [[nodiscard]] std::size_t prompt_count() const { return prompts.size(); }
  [[nodiscard]] std::size_t response_count() const { return finish_reasons.size(); }
  [[nodiscard]] std::size_t token_count() const { return tokens.size(); }

  // Views into this batch: keep it alive and unchanged while they are used.
  [[nodiscard]] token_layout layout() const { return token_layout(token_offsets, loss_mask); }
  [[nodiscard]] group_layout groups() const { return group_layout(group_offsets); }

  [[nodiscard]] std::size_t group_of(std::size_t response) const {
    const auto it = std::upper_bound(group_offsets.begin(), group_offsets.end(),
                                     static_cast<std::int64_t>(response));
    return static_cast<std::size_t>(it - group_offsets.begin()) - 1;
  }
  [[nodiscard]] std::size_t length(std::size_t response) const {
    return static_cast<std::size_t>(token_offsets[response + 1] - token_offsets[response]);
  }
  [[nodiscard]] std::span<const std::int32_t> response_tokens(std::size_t response) const {
    return std::span<const std::int32_t>(tokens).subspan(
        static_cast<std::size_t>(token_offsets[response]), length(response));
  }
  // The model's tokens of each response: every token, or for an episode its actions
  // (loss mask 1), not the environment's observations; length filters and metrics read
  // these.
  [[nodiscard]] std::vector<std::int64_t> lengths() const {
    std::vector<std::int64_t> out(response_count());
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (episodes.empty() || loss_mask.empty()) {
        out[i] = token_offsets[i + 1] - token_offsets[i];
        continue;
      }
      for (auto t = token_offsets[i]; t < token_offsets[i + 1]; ++t)
        out[i] += loss_mask[static_cast<std::size_t>(t)] != 0 ? 1 : 0;
    }
    return out;
  }
  [[nodiscard]] std::vector<std::uint8_t> truncated_flags() const {
    std::vector<std::uint8_t> out(response_count());
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = finish_reasons[i] == finish_reason::truncated ? 1 : 0;
    return out;
  }
};

// Throws unless `batch` is well formed; `who` names the producer in the message
// (e.g. "policy.generate"). With expected_prompts / group_size non-zero, also checks
// that the batch answers a request of that shape.
inline void validate_rollout_batch(const rollout_batch& batch, std::string_view who,
                                   std::size_t expected_prompts = 0,
                                   std::size_t group_size = 0) {
  const std::string w(who);
  const auto field = [&](const char* name) { return w + " result ." + name; };
  if (batch.group_offsets.size() != batch.prompts.size() + 1)
    detail::fail(field("group_offsets"), "has " + std::to_string(batch.group_offsets.size()) +
                                             " entries for " + std::to_string(batch.prompts.size()) +
                                             " prompts (expected prompts + 1)");
  if (batch.token_offsets.empty() || batch.token_offsets.size() != batch.finish_reasons.size() + 1)
    detail::fail(field("token_offsets"),
                 "has " + std::to_string(batch.token_offsets.size()) + " entries for " +
                     std::to_string(batch.finish_reasons.size()) +
                     " responses (expected responses + 1)");
  (void)token_layout(batch.token_offsets, batch.loss_mask);  // offsets and mask
  if (batch.group_offsets.front() != 0 ||
      batch.group_offsets.back() != static_cast<std::int64_t>(batch.response_count()))
    detail::fail(field("group_offsets"), "must run from 0 to the response count " +
                                             std::to_string(batch.response_count()));
  (void)group_layout(batch.group_offsets);  // monotone, no empty group
  if (batch.token_offsets.back() != static_cast<std::int64_t>(batch.tokens.size()))
    detail::fail(field("tokens"), "has " + std::to_string(batch.tokens.size()) +
                                      " entries, but token_offsets ends at " +
                                      std::to_string(batch.token_offsets.back()));
  detail::require_size(batch.behaviour_log_probs.size(), batch.tokens.size(),
                       field("behaviour_log_probs"), "one per token");
  detail::require_size(batch.texts.size(), batch.response_count(), field("texts"),
                       "one per response");
  if (!batch.episodes.empty()) {
    detail::require_size(batch.episodes.size(), batch.response_count(), field("episodes"),
                         "one per response, or empty");
    for (std::size_t i = 0; i < batch.episodes.size(); ++i) {
      const episode_summary& e = batch.episodes[i];
      const auto length = static_cast<std::int64_t>(batch.length(i));
      bool ordered = e.observation_begin.size() == e.turns() && e.turn_rewards.size() == e.turns();
      for (std::size_t k = 0; ordered && k < e.turns(); ++k) {
        const std::int64_t next = k + 1 < e.turns() ? e.action_begin[k + 1] : length;
        ordered = (k == 0 || e.action_begin[k] >= e.observation_begin[k - 1]) &&
                  e.action_begin[k] <= e.observation_begin[k] && e.observation_begin[k] <= next &&
                  next <= length;
      }
      if (!ordered)
        detail::fail_at(field("episodes"), i,
                        "has turn boundaries that are not ordered within its " +
                            std::to_string(length) + " tokens, or not one reward per turn");
    }
  }
  if (expected_prompts != 0 && batch.prompt_count() != expected_prompts)
    detail::fail(field("prompts"), "holds " + std::to_string(batch.prompt_count()) +
                                       " prompts, but " + std::to_string(expected_prompts) +
                                       " were requested");
  if (group_size != 0)
    for (std::size_t g = 0; g < batch.prompt_count(); ++g)
      if (batch.group_offsets[g + 1] - batch.group_offsets[g] !=
          static_cast<std::int64_t>(group_size))
        detail::fail_at(field("group_offsets"), g,
                        "holds " + std::to_string(batch.group_offsets[g + 1] - batch.group_offsets[g]) +
                            " responses, but the request asked for " + std::to_string(group_size));
}

// The sub-batch of the kept sequences of `selection` (made over batch.groups()), in
// order. Per-sequence arrays follow with selection.kept_sequences.
[[nodiscard]] inline rollout_batch subset(const rollout_batch& batch,
                                          const group_selection& selection) {
  rollout_batch out;
  const bool masked = !batch.loss_mask.empty();
  std::size_t k = 0;
  for (std::size_t g = 0; g < batch.prompt_count(); ++g) {
    if (selection.kept_groups[g] == 0) continue;
    out.add_prompt(batch.prompts[g]);
    const auto last = static_cast<std::size_t>(batch.group_offsets[g + 1]);
    for (; k < selection.kept_sequences.size() && selection.kept_sequences[k] < last; ++k) {
      const std::size_t i = selection.kept_sequences[k];
      const auto first_token = static_cast<std::size_t>(batch.token_offsets[i]);
      const std::size_t n = batch.length(i);
      out.add_response(batch.response_tokens(i),
                       std::span<const float>(batch.behaviour_log_probs).subspan(first_token, n),
                       batch.finish_reasons[i], batch.texts[i]);
      if (!batch.episodes.empty()) out.episodes.push_back(batch.episodes[i]);
      if (masked)
        out.loss_mask.insert(out.loss_mask.end(), batch.loss_mask.begin() + static_cast<std::ptrdiff_t>(first_token),
                             batch.loss_mask.begin() + static_cast<std::ptrdiff_t>(first_token + n));
    }
  }
  return out;
}

// The sub-batch of whole groups whose flag is non-zero.
[[nodiscard]] inline rollout_batch subset_groups(const rollout_batch& batch,
                                                 std::span<const std::uint8_t> keep_group) {
  return subset(batch, select_groups(batch.groups(), keep_group));
}

}  // namespace cascade_rl
