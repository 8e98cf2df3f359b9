#pragma once
// The launch shapes of the CUDA kernels (kernel/*.cuh) as a policy type, in the manner of
// CUB's tuning policies: every CUB-shaped call of device/*.cuh takes one as its leading
// template parameter (`cuda::cispo_loss<my_tuning>(temp, bytes, ...)`, the value type
// still deduced), passes it to its kernels (`__launch_bounds__(Tuning::member)`) and sizes
// its grid and temporary storage with it. Query the temporary-storage size and run with the
// same policy: the size may depend on it (local_loss_counts keeps a partial per CUDA block),
// and storage smaller than the run's own query is refused (cudaErrorInvalidValue).
//
// Why a policy cannot change the bits: no floating-point sum of a kernel crosses a warp in an
// order that depends on the block. The token sums are a warp per canonical block of 4096
// tokens (core/canonical_sum.hpp: 32 interleaved lanes and the butterfly), the partials
// joined in block order on one thread; every per-item kernel runs its item's arithmetic on
// one thread in the host's order; a group's moments are its team leader's, in the host's
// order; a log-prob row is 16 fixed lanes of one warp. Only integer counts (valid tokens,
// non-empty sequences, a first index) are reduced across a CUDA block, and they are exact in
// any order. The sizes whose change would change bits are not members: they stay fixed
// where they are defined (canonical_block, row_threads, combine_block_threads).

namespace cascade_rl::cuda {

struct default_tuning {
  // A warp per item: broadcast_to_tokens and place_on_last_valid_token (a warp per
  // sequence), the per-sequence valid counts (seq-mean-token-mean, local_loss_counts, and
  // its one-block join of the partials), the token losses and the whitening sums (a warp per
  // canonical block of 4096 tokens), the covariance block sums. The warp's lanes and their
  // butterfly are the canonical order; the block only groups warps.
  static constexpr unsigned warp_item_block_threads = 256;
  // A thread per item (a token, a sequence, a group or a score): the recurrences (discounted
  // returns, GAE, ReMax, the optimal token baseline), the pre-passes of GSPO and GMPO,
  // GRPO pass@k, OPO, GPG (and its per-thread non-zero counts), GDPO's combine, the
  // distillation difference, the whitening's map, the input checks, the gather, the group
  // filter's flags and the covariance selection's keys and marking.
  static constexpr unsigned thread_item_block_threads = 256;
  // The group kernel: 256 / W teams of W lanes per block (W 4 to 32 from the groups' size
  // hint), or the whole block for one group past 1024 rewards; the leader computes the
  // moments alone, the block reduces only a first index (an integer).
  static constexpr unsigned group_block_threads = 256;
  // log_probs_from_logits and log_probs_backward: 16 threads per row (the fixed lanes of
  // terms/log_sum_exp.hpp's order), so logits_block_threads / 16 rows per block.
  static constexpr unsigned logits_block_threads = 256;
  // The rollout correction's row passes (pre-pass and token pass), a thread per row: few
  // items of long work, so small blocks spread them over more multiprocessors.
  static constexpr unsigned rollout_row_block_threads = 64;
  // The rollout correction's channel sums and extremes, a thread per canonical block.
  static constexpr unsigned rollout_sum_block_threads = 32;
};

namespace detail {

// Blocks of whole warps (the warp-per-item kernels, the team reductions and the logits
// kernels shuffle with the full mask; a warp per item indexes items by warp), at most 1024
// threads (CUDA's limit; also 32 warps, the partials block_reduce keeps in its
// `__shared__ unsigned char shared[32 * block_reduce_bytes]`). Whole warps are whole pairs
// of 16-thread logits rows, and whole teams of 4 to 32 lanes.
template <unsigned Threads>
inline constexpr bool whole_warp_block = Threads >= 32 && Threads % 32 == 0 && Threads <= 1024;

// Not tunable: the launches that join partials on one thread (combine_tallies_kernel,
// whiten_mean_kernel, whiten_scale_kernel, gpg_scale_kernel) run one warp whose thread 0
// adds the partials in block order, the canonical order's last step; more threads would
// only idle, and a split of the fold would change its order and so the bits.
inline constexpr unsigned combine_block_threads = 32;

}  // namespace detail

// What a tuning policy must satisfy: every member of default_tuning, each a block of whole
// warps of at most 1024 threads. (A member missing, or not a constant, refuses the policy.)
template <class Tuning>
concept tuning_policy = detail::whole_warp_block<Tuning::warp_item_block_threads> &&
                        detail::whole_warp_block<Tuning::thread_item_block_threads> &&
                        detail::whole_warp_block<Tuning::group_block_threads> &&
                        detail::whole_warp_block<Tuning::logits_block_threads> &&
                        detail::whole_warp_block<Tuning::rollout_row_block_threads> &&
                        detail::whole_warp_block<Tuning::rollout_sum_block_threads>;

static_assert(tuning_policy<default_tuning>);

}  // namespace cascade_rl::cuda
