#pragma once
// veRL's covariance-selection policy losses (Cui et al. 2025, "The Entropy Mechanism of
// Reinforcement Learning for Reasoning Language Models"):
//
//   clip_cov_loss   Clip-Cov, veRL compute_policy_loss_clip_cov: PPO's clipped surrogate
//                   (no dual clip, no log-ratio clamp) with the gradient stopped on a few
//                   tokens drawn at random among those of high covariance.
//   kl_cov_loss     KL-Cov, veRL compute_policy_loss_kl_cov: the unclipped surrogate -A r
//                   plus ppo_kl_coef |logp - old_logp| on the tokens of largest covariance.
//
// The covariance of token t is cov_t = (A_t - mean A) * (logp_t - mean logp) over the
// valid tokens of the batch given to the call (terms/covariance_tokens.hpp): the means
// are the canonical sums (core/canonical_sum.hpp) over the valid count, the same bits on
// every executor.
//
// Selection. A call takes a token_selection, either
//   - token_selection::replay(tokens): exactly these flat token indices, each a valid
//     token, none repeated (to replay veRL's own torch.randperm draw, which no other
//     generator reproduces); taken as given, not checked against the candidates; or
//   - token_selection::seeded(seed): OUR deterministic draw. The candidates are the
//     valid tokens where PPO's clip is inactive and clip_cov_lb < cov_t < clip_cov_ub;
//     clip_num = max(floor(clip_cov_ratio * valid tokens), 1) as veRL; when there are
//     more candidates than clip_num, those with the smallest (key, index) are selected,
//     key = terms::selection_key(seed, t), the (t + 1)-th output of SplitMix64 started at
//     seed. It depends on (seed, t, the inputs) alone, so every executor (host seq / par,
//     the Thrust path, the CUDA kernels) selects the same tokens. It is not veRL's draw.
// KL-Cov's own selection is deterministic (kl_cov_selection): the k = max(floor(
// kl_cov_ratio * valid), 1) valid tokens of largest SIGNED cov (veRL's torch.topk), none
// when no token is valid. Among equal cov (+0 and -0 equal) the smaller index goes first,
// the order of a stable descending sort; torch.topk leaves the order of ties unspecified,
// so where the k-th and (k+1)-th cov tie veRL may pick another of them: replay its
// tokens (token_selection::replay) to reproduce it exactly.
// `selected_out`, when not empty, receives the selected tokens in increasing index order
// (metrics.clipped of them; it must hold that many), so a caller can log or replay them.
//
// The selection is over the tokens one call is given: the means, clip_num and the draw
// change when a batch is split into micro-batches (veRL selects per micro-batch too), so
// the loss is NOT partition-invariant, unlike the other losses. Given one fixed global
// selection replayed into each micro-batch (its tokens that fall there), the shares with
// a global normaliser add up to the whole batch's loss.
//
// Each returns the aggregated loss and writes grad_out[t] = dL/dlogp_t (0 on masked and
// selected tokens); metrics.clipped counts the selected tokens (veRL's pg_clipfrac),
// approx_kl is the unclamped old_logp - logp (veRL's ppo_kl). KL-Cov: metrics.clipped
// counts the selected tokens too (veRL reports no such metric), approx_kl is the mean of
// |logp - old_logp| over the valid tokens, unweighted (veRL's ppo_kl there).
//
// On the host a call reads the tokens three times: the means, the inputs' checks riding
// along (the checks that name a bad input run only when one is bad); the selection (a
// replay is checked instead), where each thread's range of tokens keeps the smallest
// (key, index) it has met behind a bound that passes over most chunks, and the few kept
// are merged; the loss pass, which reads the selection as a byte per token from a buffer
// of the calling thread that every call leaves zero. The tokens selected and every bit of
// the result are those of the rule above on every executor and thread count.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cascade_rl/algorithms/loss_inputs.hpp"
#include "cascade_rl/algorithms/policy_loss.hpp"
#include "cascade_rl/algorithms/policy_loss_spec.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/core/token_layout.hpp"
#include "cascade_rl/options/policy_losses.hpp"
#include "cascade_rl/terms/covariance_tokens.hpp"

namespace cascade_rl {

namespace detail {

inline void validate_clip_cov_options(const clip_cov_options& options) {
  if (!(options.clip_low >= 0))
    fail("options.clip_low", "is " + std::to_string(options.clip_low) + ", expected >= 0");
  if (!(options.clip_high >= 0))
    fail("options.clip_high", "is " + std::to_string(options.clip_high) + ", expected >= 0");
  if (!(options.clip_cov_ratio > 0 && std::isfinite(options.clip_cov_ratio)))
    fail("options.clip_cov_ratio", "is " + std::to_string(options.clip_cov_ratio) +
                                       ", expected a finite value > 0 (veRL asserts it)");
  if (std::isnan(options.clip_cov_lb)) fail("options.clip_cov_lb", "is NaN");
  if (std::isnan(options.clip_cov_ub)) fail("options.clip_cov_ub", "is NaN");
}

inline void validate_kl_cov_options(const kl_cov_options& options) {
  if (!(options.kl_cov_ratio > 0 && options.kl_cov_ratio <= 1))
    fail("options.kl_cov_ratio",
         "is " + std::to_string(options.kl_cov_ratio) +
             ", expected a value in (0, 1] (veRL asserts > 0; above 1 torch.topk would be asked "
             "for more tokens than there are)");
  if (!(options.ppo_kl_coef >= 0 && std::isfinite(options.ppo_kl_coef)))
    fail("options.ppo_kl_coef",
         "is " + std::to_string(options.ppo_kl_coef) + ", expected a finite value >= 0");
}

// KL-Cov's overloads with a selection take a replay only (every executor).
inline void require_replayed_kl_cov(const token_selection& selection) {
  if (!selection.replayed)
    fail("selection",
         "is seeded; KL-Cov selects deterministically: pass token_selection::replay(tokens), or "
         "call kl_cov_loss without a selection");
}

// ---- the inputs and their means -----------------------------------------------------------
//
// A call makes three passes over the tokens: the means with the inputs' checks riding
// along, the selection (a seeded or own one; a replay is checked instead), the loss.

// The valid count and the means of A and logp over the valid tokens (0 when none).
struct covariance_means {
  std::size_t valid = 0;
  double advantage = 0;
  double log_prob = 0;
};

// The inputs' checks in the order their errors name them (old_log_probs only where the
// caller reads it): each input's size, then its values on the valid tokens.
template <class Policy, std::floating_point T>
void validate_covariance_inputs(const Policy& policy, const token_layout& layout,
                                const policy_ratio_inputs<T>& inputs, bool reads_old) {
  validate_token_input(policy, layout, inputs.log_probs, "log_probs");
  if (reads_old) validate_token_input(policy, layout, inputs.old_log_probs, "old_log_probs");
  validate_token_input(policy, layout, inputs.advantages, "advantages");
}

// The means of A and logp in one pass (two canonical sums over the valid tokens, the
// bits of one blocked_sum each) with the valid count and the inputs' finiteness riding
// along; the checks that name a bad input run only when a size is wrong or a valid token
// holds a NaN or infinite value, so a call reads its inputs once before the selection.
template <class Policy, std::floating_point T>
covariance_means checked_covariance_means(const Policy& policy, const token_layout& layout,
                                          const policy_ratio_inputs<T>& inputs, bool reads_old) {
  const std::size_t n = layout.tokens();
  const auto refuse = [&] {
    validate_covariance_inputs(policy, layout, inputs, reads_old);
    fail("inputs",
         "failed a check of the covariance means that the loss's own checks did not "
         "name (a size, or a NaN or infinite value on a valid token)");
  };
  if (inputs.log_probs.size() != n || (reads_old && inputs.old_log_probs.size() != n) ||
      inputs.advantages.size() != n)
    refuse();
  const T* log_probs = inputs.log_probs.data();
  const T* advantages = inputs.advantages.data();
  // Without old_log_probs the advantages are checked twice: the same loop either way.
  const T* old_log_probs = reads_old ? inputs.old_log_probs.data() : advantages;
  const std::uint8_t* mask = layout.has_mask() ? layout.mask().data() : nullptr;
  struct scan {
    std::size_t valid = 0;
    unsigned nonfinite = 0;
  };
  const auto total = chunked_blocked_sum<2>(
      policy, n, scan{},
      [=](scan& state, std::size_t first, std::size_t last, double* out) {
        unsigned bad = 0;
        std::size_t valid = 0;
        if (mask == nullptr) {
          for (std::size_t t = first; t < last; ++t) {
            bad |= static_cast<unsigned>(!std::isfinite(log_probs[t])) |
                   static_cast<unsigned>(!std::isfinite(old_log_probs[t])) |
                   static_cast<unsigned>(!std::isfinite(advantages[t]));
            out[t - first] = static_cast<double>(advantages[t]);
            out[sum_chunk + t - first] = static_cast<double>(log_probs[t]);
          }
          valid = last - first;
        } else {
          for (std::size_t t = first; t < last; ++t) {
            const std::uint64_t keep = math::detail::mask_of(mask[t] != 0);
            bad |= (static_cast<unsigned>(!std::isfinite(log_probs[t])) |
                    static_cast<unsigned>(!std::isfinite(old_log_probs[t])) |
                    static_cast<unsigned>(!std::isfinite(advantages[t]))) &
                   static_cast<unsigned>(keep & 1);
            valid += static_cast<std::size_t>(keep & 1);
            out[t - first] = math::detail::blend(keep, static_cast<double>(advantages[t]), 0.0);
            out[sum_chunk + t - first] =
                math::detail::blend(keep, static_cast<double>(log_probs[t]), 0.0);
          }
        }
        state.valid += valid;
        state.nonfinite |= bad;
      },
      [](scan& all, const scan& part) {
        all.valid += part.valid;
        all.nonfinite |= part.nonfinite;
      });
  if (total.state.nonfinite != 0) refuse();
  covariance_means m;
  m.valid = total.state.valid;
  if (m.valid == 0) return m;
  const double count = static_cast<double>(m.valid);
  m.advantage = total.sums[0] / count;
  m.log_prob = total.sums[1] / count;
  return m;
}

// ---- the selections ------------------------------------------------------------------------

// A candidate's (key, token), ordered as the pair: the selections keep the smallest.
struct keyed_token {
  std::uint64_t key;
  std::size_t token;
  friend bool operator<(const keyed_token& a, const keyed_token& b) {
    return a.key < b.key || (a.key == b.key && a.token < b.token);
  }
};

// The `count` smallest (key, token) of candidates offered in increasing token order. Up to
// 2 * count are held; then the count smallest are kept and `bound` drops to the key of
// the count-th: a later token has a larger index, so it is among the count smallest only
// with a smaller key, and no other is held at all.
class smallest_keys {
 public:
  explicit smallest_keys(std::size_t count) : count_(count) {}

  [[nodiscard]] std::uint64_t bound() const { return bound_; }

  void offer(std::uint64_t key, std::size_t token) {
    held_.push_back({key, token});
    if (held_.size() >= 2 * count_) keep_smallest();
  }

  // The count smallest (or every one, when fewer were offered), in no order.
  std::vector<keyed_token>& kept() {
    keep_smallest();
    return held_;
  }

 private:
  void keep_smallest() {
    if (held_.size() <= count_) return;
    const auto last_kept = held_.begin() + static_cast<std::ptrdiff_t>(count_ - 1);
    std::nth_element(held_.begin(), last_kept, held_.end());
    bound_ = last_kept->key;
    held_.resize(count_);
  }

  std::size_t count_;
  std::uint64_t bound_ = terms::not_a_candidate;
  std::vector<keyed_token> held_;
};

// Tokens per step of a selection scan: keys(first, last, out) writes that many at once.
inline constexpr std::size_t selection_chunk = 256;

// How many contiguous ranges a selection scans side by side: one per thread, none shorter
// than a few blocks.
template <class Policy>
std::size_t selection_tasks(const Policy& policy, std::size_t n) {
  if constexpr (exec::parallel_host_policy<Policy>) {
    const std::size_t most = (n + 4 * reduce_block_size - 1) / (4 * reduce_block_size);
    const std::size_t threads = static_cast<std::size_t>(thread_count(policy));
    return std::max<std::size_t>(1, std::min(most, threads));
  } else {
    return 1;
  }
}

// The `count` tokens of smallest (key, token) among those whose key is not
// terms::not_a_candidate, in increasing index order: the rule of both selections (the
// device paths reach it by a stable sort of every token's key). keys(first, last, out)
// writes the keys of tokens [first, last) (at most selection_chunk) into out[0, last -
// first). Each range of tokens keeps its own count smallest (smallest_keys: a chunk whose
// keys are all at or above its bound is passed over), then the few kept are merged; the
// pairs are distinct, so the set is the same whatever the ranges.
template <class Policy, class Keys>
std::vector<std::size_t> smallest_keyed_tokens(const Policy& policy, std::size_t n,
                                               std::size_t count, const Keys& keys) {
  if (count == 0) return {};
  const std::size_t tasks = selection_tasks(policy, n);
  const std::size_t per_task =
      ((n + tasks - 1) / tasks + selection_chunk - 1) / selection_chunk * selection_chunk;
  std::vector<smallest_keys> kept(tasks, smallest_keys(count));
  for_each_index(
      policy, tasks,
      [&](std::size_t task) {
        smallest_keys& mine = kept[task];
        const std::size_t first = std::min(n, task * per_task);
        const std::size_t last = std::min(n, first + per_task);
        alignas(64) std::uint64_t key[selection_chunk];
        for (std::size_t begin = first; begin < last; begin += selection_chunk) {
          const std::size_t size = std::min(selection_chunk, last - begin);
          keys(begin, begin + size, key);
          std::uint64_t low = terms::not_a_candidate;
          for (std::size_t i = 0; i < size; ++i) low = key[i] < low ? key[i] : low;
          if (low >= mine.bound()) continue;
          for (std::size_t i = 0; i < size; ++i)
            if (key[i] < mine.bound()) mine.offer(key[i], begin + i);
        }
      },
      /*min_parallel=*/2);
  std::vector<keyed_token> all;
  for (smallest_keys& part : kept) {
    const std::vector<keyed_token>& mine = part.kept();
    all.insert(all.end(), mine.begin(), mine.end());
  }
  if (all.size() > count) {
    std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(count), all.end());
    all.resize(count);
  }
  std::vector<std::size_t> selected;
  selected.reserve(all.size());
  for (const keyed_token& k : all) selected.push_back(k.token);
  std::sort(selected.begin(), selected.end());
  return selected;
}

// keys(first, last, out) of smallest_keyed_tokens from key_of(t, keep), keep the valid
// mask of token t (all ones or zero): a branch-free loop per chunk, one without the mask
// when the layout has none.
template <class KeyOf>
auto masked_keys(const token_layout& layout, const KeyOf& key_of) {
  const std::uint8_t* mask = layout.has_mask() ? layout.mask().data() : nullptr;
  return [mask, key_of](std::size_t first, std::size_t last, std::uint64_t* out) {
    if (mask == nullptr) {
      for (std::size_t t = first; t < last; ++t) out[t - first] = key_of(t, ~std::uint64_t{0});
    } else {
      for (std::size_t t = first; t < last; ++t)
        out[t - first] = key_of(t, math::detail::mask_of(mask[t] != 0));
    }
  };
}

// Our seeded draw: the candidates' clip_num smallest (key, index), in index order.
template <class Policy, std::floating_point T>
std::vector<std::size_t> seeded_clip_cov_tokens(const Policy& policy, const token_layout& layout,
                                                const policy_ratio_inputs<T>& inputs,
                                                const covariance_means& means, std::uint64_t seed,
                                                const clip_cov_options& options) {
  if (means.valid == 0) return {};
  const T* log_probs = inputs.log_probs.data();
  const T* old_log_probs = inputs.old_log_probs.data();
  const T* advantages = inputs.advantages.data();
  const double mean_advantage = means.advantage;
  const double mean_log_prob = means.log_prob;
  const clip_cov_options params = options;
  return smallest_keyed_tokens(
      policy, layout.tokens(), terms::selection_count(options.clip_cov_ratio, means.valid),
      masked_keys(layout, [=](std::size_t t, std::uint64_t keep) CASCADE_RL_ALWAYS_INLINE {
        const double logp = static_cast<double>(log_probs[t]);
        const double advantage = static_cast<double>(advantages[t]);
        const double cov = terms::covariance_term(advantage, logp, mean_advantage, mean_log_prob);
        const std::uint64_t candidate =
            keep & terms::clip_cov_candidate_mask(logp, static_cast<double>(old_log_probs[t]),
                                                  advantage, cov, params);
        return terms::selection_key(seed, t) | ~candidate;
      }));
}

// KL-Cov's selection: the k = max(floor(kl_cov_ratio * valid), 1) valid tokens of largest
// cov, ties to the smaller index (terms::covariance_key), in index order; none when no
// token is valid.
template <class Policy, std::floating_point T>
std::vector<std::size_t> top_covariance_tokens(const Policy& policy, const token_layout& layout,
                                               const policy_ratio_inputs<T>& inputs,
                                               const covariance_means& means, double ratio) {
  if (means.valid == 0) return {};
  const T* log_probs = inputs.log_probs.data();
  const T* advantages = inputs.advantages.data();
  const double mean_advantage = means.advantage;
  const double mean_log_prob = means.log_prob;
  return smallest_keyed_tokens(
      policy, layout.tokens(), terms::selection_count(ratio, means.valid),
      masked_keys(layout, [=](std::size_t t, std::uint64_t keep) CASCADE_RL_ALWAYS_INLINE {
        return terms::covariance_key(terms::covariance_term(static_cast<double>(advantages[t]),
                                                            static_cast<double>(log_probs[t]),
                                                            mean_advantage, mean_log_prob)) |
               ~keep;
      }));
}

// ---- a selection as the loss reads it ------------------------------------------------------

// The checks of a replayed selection over n tokens, in order for each entry: in range,
// valid(t), not repeated (marked(t): taken by an earlier entry); mark(t) takes it.
template <class Valid, class Marked, class Mark>
void check_replayed_tokens(std::size_t n, std::span<const std::size_t> tokens, const Valid& valid,
                           const Marked& marked, const Mark& mark) {
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    const std::size_t t = tokens[k];
    if (t >= n)
      fail_at("selection.tokens", k,
              "is token " + std::to_string(t) + ", beyond the " + std::to_string(n) + " tokens");
    if (!valid(t))
      fail_at("selection.tokens", k,
              "is token " + std::to_string(t) + ", which the mask leaves out");
    if (marked(t)) fail_at("selection.tokens", k, "repeats token " + std::to_string(t));
    mark(t);
  }
}

// A replayed selection checked (in range, valid(t), not repeated) into a mask of n tokens.
// The device layer passes a valid that accepts every token: its layout is in device
// memory, and the device checks the mask against it before the loss runs.
template <class Valid>
std::vector<std::uint8_t> replayed_selection_mask(std::size_t n,
                                                  std::span<const std::size_t> tokens,
                                                  const Valid& valid) {
  std::vector<std::uint8_t> selected(n, 0);
  check_replayed_tokens(
      n, tokens, valid, [&](std::size_t t) { return selected[t] != 0; },
      [&](std::size_t t) { selected[t] = 1; });
  return selected;
}

// A byte per token, set on the selected tokens: the loss pass's view of a selection. The
// bytes are a buffer of the calling thread that is all zero between calls: a call marks
// its tokens and unmarks them when it ends (returning or throwing), so that it neither
// allocates nor clears n bytes (the buffer keeps the largest n its thread has seen). A
// second one alive on the same thread takes bytes of its own.
class selection_marks {
 public:
  // A byte of its own type, not a character type: its loads cannot alias the loss pass's
  // stores, which spares the vectorised token loop its run-time alias checks.
  enum class flag : std::uint8_t { no, yes };
  explicit selection_marks(std::size_t n) {
    shared_buffer& shared = shared_of_thread();
    if (!shared.in_use) {
      if (shared.bytes.size() < n) shared.bytes.assign(n, flag::no);
      shared.in_use = true;
      shared_ = &shared;
      bytes_ = shared.bytes.data();
    } else {
      own_.assign(n, flag::no);
      bytes_ = own_.data();
    }
  }
  ~selection_marks() {
    if (shared_ == nullptr) return;
    for (const std::size_t t : marked_) bytes_[t] = flag::no;
    shared_->in_use = false;
  }
  selection_marks(const selection_marks&) = delete;
  selection_marks& operator=(const selection_marks&) = delete;

  [[nodiscard]] bool marked(std::size_t t) const { return bytes_[t] != flag::no; }
  // Noted before it is set: an unmarked byte is never left set.
  void mark(std::size_t t) {
    marked_.push_back(t);
    bytes_[t] = flag::yes;
  }
  void mark_all(std::span<const std::size_t> tokens) {
    marked_.reserve(marked_.size() + tokens.size());
    for (const std::size_t t : tokens) mark(t);
  }
  [[nodiscard]] const flag* bytes() const { return bytes_; }

 private:
  struct shared_buffer {
    std::vector<flag> bytes;
    bool in_use = false;
  };
  static shared_buffer& shared_of_thread() {
    thread_local shared_buffer buffer;
    return buffer;
  }

  shared_buffer* shared_ = nullptr;
  flag* bytes_ = nullptr;
  std::vector<flag> own_;
  std::vector<std::size_t> marked_;
};

// The selection into `marks`: the replayed tokens (checked; after the inputs' checks, as
// always) or draw()'s, which the inputs' checks precede. Returns the selected tokens in
// increasing index order, and reports them into selected_out when that is not empty.
template <class Policy, std::floating_point T, class Draw>
std::vector<std::size_t> select_tokens(const Policy& policy, const token_layout& layout,
                                       const policy_ratio_inputs<T>& inputs,
                                       const token_selection& selection, const Draw& draw,
                                       selection_marks& marks,
                                       std::span<std::size_t> selected_out) {
  std::vector<std::size_t> tokens;
  if (selection.replayed) {
    // The inputs' checks (a replay needs no means: they ride along unused).
    (void)checked_covariance_means(policy, layout, inputs, /*reads_old=*/true);
    check_replayed_tokens(
        layout.tokens(), selection.tokens, [&](std::size_t t) { return layout.valid(t); },
        [&](std::size_t t) { return marks.marked(t); }, [&](std::size_t t) { marks.mark(t); });
    tokens.assign(selection.tokens.begin(), selection.tokens.end());
    std::sort(tokens.begin(), tokens.end());
  } else {
    tokens = draw(checked_covariance_means(policy, layout, inputs, /*reads_old=*/true));
    marks.mark_all(tokens);
  }
  if (!selected_out.empty()) {
    if (selected_out.size() < tokens.size())
      fail("selected_out", "holds " + std::to_string(selected_out.size()) + " entries, but " +
                               std::to_string(tokens.size()) + " tokens were selected");
    std::copy(tokens.begin(), tokens.end(), selected_out.begin());
  }
  return tokens;
}

// The loss pass of both losses: token(logp, old_logp, A, selected) on every token, the
// drivers' canonical sums (old_policy_passes' term, its bits). The inputs were checked
// before the selection, so only rollout_is_weights' finiteness rides along here.
template <class Policy, std::floating_point T, class Token>
policy_loss_result covariance_loss_pass(const Policy& policy, const token_layout& layout,
                                        const policy_ratio_inputs<T>& inputs,
                                        const selection_marks& marks, std::span<T> grad_out,
                                        const loss_normalizer& normalizer,
                                        loss_aggregation aggregation, const Token& token) {
  const T* log_probs = inputs.log_probs.data();
  const T* old_log_probs = inputs.old_log_probs.data();
  const T* advantages = inputs.advantages.data();
  const selection_marks::flag* selected = marks.bytes();
  return policy_loss_passes(
      policy, layout,
      std::array{token_input<T>{inputs.log_probs, "log_probs"},
                 token_input<T>{inputs.old_log_probs, "old_log_probs"},
                 token_input<T>{inputs.advantages, "advantages"}},
      inputs.rollout_is_weights, no_correction{}, grad_out, normalizer, aggregation,
      [](std::size_t) { return false; },
      [=](std::size_t t, policy_loss_metrics& m) CASCADE_RL_ALWAYS_INLINE {
        ++m.valid_tokens;
        const auto r =
            token(static_cast<double>(log_probs[t]), static_cast<double>(old_log_probs[t]),
                  static_cast<double>(advantages[t]), selected[t] != selection_marks::flag::no);
        terms::count_clips_if_any(r, m);
        return token_loss_with_kl(r);
      });
}

}  // namespace detail

// Our seeded Clip-Cov selection (token_selection::seeded), in increasing index order:
// for logging, or to replay the same draw elsewhere.
template <exec::host_policy Policy, std::floating_point T>
std::vector<std::size_t> clip_cov_seeded_selection(const Policy& policy, const token_layout& layout,
                                                   const policy_ratio_inputs<T>& inputs,
                                                   std::uint64_t seed,
                                                   const clip_cov_options& options = {}) {
  detail::validate_clip_cov_options(options);
  const detail::covariance_means means =
      detail::checked_covariance_means(policy, layout, inputs, /*reads_old=*/true);
  return detail::seeded_clip_cov_tokens(policy, layout, inputs, means, seed, options);
}

// Clip-Cov: l_t = max(-A_t r_t, -A_t clamp(r_t, 1 - clip_low, 1 + clip_high)) * (1 - s_t),
// r_t = exp(logp_t - old_logp_t), s_t = 1 on a selected token (a stop-gradient mask),
// times inputs.rollout_is_weights when given; dl_t/dlogp_t = -A_t r_t where PPO's clip is
// inactive and s_t = 0, else 0. See the top of this file for the selection.
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result clip_cov_loss(const Policy& policy, const token_layout& layout,
                                 const policy_ratio_inputs<output_value_t<Out>>& inputs,
                                 const token_selection& selection, Out&& grad_out,
                                 const loss_normalizer& normalizer,
                                 const clip_cov_options& options = {},
                                 std::span<std::size_t> selected_out = {}) {
  detail::validate_clip_cov_options(options);
  const clip_cov_options params = options;  // a local copy: stores cannot alias it
  detail::selection_marks marks(layout.tokens());
  // The means read every input, so the inputs are checked before them.
  (void)detail::select_tokens(
      policy, layout, inputs, selection,
      [&](const detail::covariance_means& means) {
        return detail::seeded_clip_cov_tokens(policy, layout, inputs, means, selection.seed,
                                              params);
      },
      marks, selected_out);
  return detail::covariance_loss_pass(
      policy, layout, inputs, marks, output_span(grad_out), normalizer, params.aggregation,
      [params](double logp, double old_logp, double advantage, bool selected)
          CASCADE_RL_ALWAYS_INLINE {
            return terms::clip_cov_token(logp, old_logp, advantage, selected, params);
          });
}

// KL-Cov's selection (see the top of this file), in increasing index order: for logging,
// or to replay it elsewhere.
template <exec::host_policy Policy, std::floating_point T>
std::vector<std::size_t> kl_cov_selection(const Policy& policy, const token_layout& layout,
                                          const policy_ratio_inputs<T>& inputs,
                                          const kl_cov_options& options = {}) {
  detail::validate_kl_cov_options(options);
  const detail::covariance_means means =
      detail::checked_covariance_means(policy, layout, inputs, /*reads_old=*/false);
  return detail::top_covariance_tokens(policy, layout, inputs, means, options.kl_cov_ratio);
}

namespace detail {

// KL-Cov's loss over a selection (replayed, or its own when `selection` is not a replay).
template <class Policy, std::floating_point T>
policy_loss_result kl_cov_passes(const Policy& policy, const token_layout& layout,
                                 const policy_ratio_inputs<T>& inputs,
                                 const token_selection& selection, std::span<T> grad_out,
                                 const loss_normalizer& normalizer, const kl_cov_options& options,
                                 std::span<std::size_t> selected_out) {
  const double ratio = options.kl_cov_ratio;
  const double coef = options.ppo_kl_coef;
  selection_marks marks(layout.tokens());
  (void)select_tokens(
      policy, layout, inputs, selection,
      [&](const covariance_means& means) {
        return top_covariance_tokens(policy, layout, inputs, means, ratio);
      },
      marks, selected_out);
  return covariance_loss_pass(
      policy, layout, inputs, marks, grad_out, normalizer, options.aggregation,
      [coef](double logp, double old_logp, double advantage, bool selected)
          CASCADE_RL_ALWAYS_INLINE {
            return terms::kl_cov_token(logp, old_logp, advantage, selected, coef);
          });
}

}  // namespace detail

// KL-Cov: l_t = -A_t r_t + s_t ppo_kl_coef |logp_t - old_logp_t|, r_t = exp(logp_t -
// old_logp_t) (no clip, no clamp), s_t = 1 on a selected token, times
// inputs.rollout_is_weights when given; dl_t/dlogp_t = -A_t r_t + s_t ppo_kl_coef
// sign(logp_t - old_logp_t). `selection` is token_selection::replay(tokens) (e.g. veRL's
// topk); the overload without one selects by kl_cov_selection's rule. A seeded selection
// is refused: KL-Cov's rule draws nothing.
template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result kl_cov_loss(const Policy& policy, const token_layout& layout,
                               const policy_ratio_inputs<output_value_t<Out>>& inputs,
                               const token_selection& selection, Out&& grad_out,
                               const loss_normalizer& normalizer,
                               const kl_cov_options& options = {},
                               std::span<std::size_t> selected_out = {}) {
  detail::validate_kl_cov_options(options);
  detail::require_replayed_kl_cov(selection);
  return detail::kl_cov_passes(policy, layout, inputs, selection, output_span(grad_out), normalizer,
                               options, selected_out);
}

template <exec::host_policy Policy, contiguous_output Out>
policy_loss_result kl_cov_loss(const Policy& policy, const token_layout& layout,
                               const policy_ratio_inputs<output_value_t<Out>>& inputs,
                               Out&& grad_out, const loss_normalizer& normalizer,
                               const kl_cov_options& options = {},
                               std::span<std::size_t> selected_out = {}) {
  detail::validate_kl_cov_options(options);
  // The means read every input, so the inputs are checked before them.
  return detail::kl_cov_passes(policy, layout, inputs, token_selection{}, output_span(grad_out),
                               normalizer, options, selected_out);
}

// ---- the specs (policy_loss_spec.hpp) --------------------------------------------------

template <>
struct policy_loss_spec<clip_cov_options> {
  static constexpr selection_use selection = selection_use::drawn;
  static void validate(const clip_cov_options& o) { detail::validate_clip_cov_options(o); }
  template <class Policy, class Layout, std::floating_point T>
  static policy_loss_result run(const Policy& policy, const Layout& layout,
                                const policy_loss_inputs<T>& in, std::span<T> grad_out,
                                const loss_normalizer& normalizer, const clip_cov_options& o) {
    return clip_cov_loss(policy, layout, detail::ratio_inputs_of(in), in.selection, grad_out,
                         normalizer, o);
  }
};

// KL-Cov selects by its own rule; inputs.selection may replay veRL's tokens instead.
template <>
struct policy_loss_spec<kl_cov_options> {
  static constexpr selection_use selection = selection_use::replayable;
  static void validate(const kl_cov_options& o) { detail::validate_kl_cov_options(o); }
  template <class Policy, class Layout, std::floating_point T>
  static policy_loss_result run(const Policy& policy, const Layout& layout,
                                const policy_loss_inputs<T>& in, std::span<T> grad_out,
                                const loss_normalizer& normalizer, const kl_cov_options& o) {
    if (in.selection.replayed)
      return kl_cov_loss(policy, layout, detail::ratio_inputs_of(in), in.selection, grad_out,
                         normalizer, o);
    return kl_cov_loss(policy, layout, detail::ratio_inputs_of(in), grad_out, normalizer, o);
  }
};

}  // namespace cascade_rl
