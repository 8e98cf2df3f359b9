#pragma once
// The output projection, log-softmax and its backward pass without the [T, V] logits:
//   logits = hidden [T, H] x weight [H, V] / temperature,
//   log_probs[t] = log softmax(logits[t])[labels[t]], entropy[t], lse[t];
// and, given the seeds g_t = dL/dlogp (the grad_out of any loss here) and optionally
// h_t = dL/dH_t (an entropy bonus or loss aggregated by aggregate_token_losses), the
// gradients of L with respect to hidden and weight:
//   dL/dlogits[t, v] = g_t (1[v == label_t] - p_tv) - h_t p_tv (log p_tv + H_t),
//   grad_hidden = dL/dlogits x weight^T / temperature,
//   grad_weight = hidden^T x dL/dlogits / temperature.
// Only small blocks of logits exist at a time, never [T, V]:
// - forward: the vocabulary tiles (options.vocab_tile columns) are the outer loop, chunks
//   of at most 32 rows (options.chunk_rows) the inner, parallel one; each row carries its
//   log-sum-exp state from tile to tile. So each tile of the weight comes from memory
//   once for all rows and is reused from cache, and the time stays linear in V once the
//   weight outgrows the caches. Extra memory: a [chunk, tile] block per thread and a
//   state per row.
// - backward: chunk by chunk, the vocabulary tiles in parallel: the chunk's logits again
//   (one more matrix product, no stored softmax), dL/dlogits, that tile's columns of
//   grad_weight and its share of grad_hidden, while the tile is in cache; the shares are
//   added in tile order. Extra memory: chunk * V floats and a [chunk, H] share per tile.
//
// THIS HEADER REQUIRES EIGEN 3.4 (Eigen/Core; CMake: find_package(Eigen3) and link
// Eigen3::Eigen) for the matrix products. The rest of cascade_rl stays standard-library
// only; include this header only where Eigen is available.
//
// Determinism: every matrix product runs on one thread over a fixed block (a row chunk
// by a vocabulary tile), the blocks are the same under exec::seq and exec::par, and
// whatever is summed across blocks is summed in a fixed order, so results are the same
// bits for any thread count. The destinations are typed with at most 32 rows at compile
// time, which keeps Eigen from starting threads of its own inside a product.

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/log_probs.hpp"
#include "cascade_rl/algorithms/log_probs_backward.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/core/parallel.hpp"
#include "cascade_rl/options/fused_linear.hpp"

namespace cascade_rl {

namespace detail {

inline constexpr std::size_t fused_max_chunk = 32;

// Row-major float matrices of at most 32 rows at compile time (see the file comment).
using chunk_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor,
                                   static_cast<int>(fused_max_chunk), Eigen::Dynamic>;
using row_major_map = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>,
                                 Eigen::Unaligned, Eigen::OuterStride<>>;
using slab_map = Eigen::Map<chunk_matrix, Eigen::Unaligned, Eigen::OuterStride<>>;

inline void validate_fused_linear(std::size_t tokens, std::size_t hidden_size, std::size_t vocab,
                                  std::span<const float> hidden, std::span<const float> weight,
                                  const fused_linear_options& options) {
  if (hidden_size == 0) fail("hidden_size", "is 0, expected at least 1");
  if (vocab == 0) fail("vocab", "is 0, expected at least 1");
  require_size(hidden.size(), tokens * hidden_size, "hidden", "tokens x hidden_size, row-major");
  require_size(weight.size(), hidden_size * vocab, "weight", "hidden_size x vocab, row-major");
  if (options.chunk_rows == 0 || options.chunk_rows > fused_max_chunk)
    fail("options.chunk_rows", "is " + std::to_string(options.chunk_rows) + ", expected 1 to 32");
  if (options.vocab_tile == 0) fail("options.vocab_tile", "is 0, expected at least 1");
  require_temperature(options.temperature);
}

// The fixed tiles of [0, n) of width `tile`.
inline std::size_t tiles_of(std::size_t n, std::size_t tile) { return (n + tile - 1) / tile; }

}  // namespace detail

// hidden: [tokens, hidden_size] row-major, tokens = labels.size(); weight: [hidden_size,
// vocab] row-major. Writes log_probs and, when not empty, entropy and lse (the
// log-sum-exp of each row's scaled logits, which the backward pass takes).
template <exec::host_policy Policy>
void fused_linear_log_probs(const Policy& policy, std::span<const float> hidden,
                            std::span<const float> weight, std::size_t hidden_size,
                            std::size_t vocab, std::span<const std::int64_t> labels,
                            std::span<float> log_probs, std::span<float> entropy,
                            std::span<float> lse, const fused_linear_options& options = {}) {
  const std::size_t tokens = labels.size();
  detail::validate_fused_linear(tokens, hidden_size, vocab, hidden, weight, options);
  detail::require_size(log_probs.size(), tokens, "log_probs", "one per label");
  if (!entropy.empty()) detail::require_size(entropy.size(), tokens, "entropy", "one per label, or empty");
  if (!lse.empty()) detail::require_size(lse.size(), tokens, "lse", "one per label, or empty");
  detail::require_labels_in_range(policy, labels, vocab);
  if (tokens == 0) return;

  const auto h = static_cast<Eigen::Index>(hidden_size);
  const auto v = static_cast<Eigen::Index>(vocab);
  const detail::row_major_map H(hidden.data(), static_cast<Eigen::Index>(tokens), h, Eigen::OuterStride<>(h));
  const detail::row_major_map W(weight.data(), h, v, Eigen::OuterStride<>(v));
  const float inverse = 1.0f / options.temperature;
  const std::size_t chunks = detail::tiles_of(tokens, options.chunk_rows);
  std::vector<detail::lse_state> states(tokens);
  std::vector<float> label_logits(tokens);

  for (std::size_t v0 = 0; v0 < vocab; v0 += options.vocab_tile) {
    const std::size_t width = std::min(options.vocab_tile, vocab - v0);
    detail::for_each_index(
        policy, chunks,
        [&](std::size_t c) {
          const std::size_t first = c * options.chunk_rows;
          const std::size_t rows = std::min(options.chunk_rows, tokens - first);
          // One block per thread, kept for later calls (no allocation per chunk).
          thread_local detail::chunk_matrix block;
          block.resize(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(width));
          block.noalias() = H.block(static_cast<Eigen::Index>(first), 0, static_cast<Eigen::Index>(rows), h) *
                            W.middleCols(static_cast<Eigen::Index>(v0), static_cast<Eigen::Index>(width));
          for (std::size_t r = 0; r < rows; ++r) {
            const std::size_t t = first + r;
            const float* x = block.data() + r * width;
            // The tile's logits fold in as row_lse folds a row: lse_chunk at a time, in order.
            for (std::size_t j = 0; j < width; j += detail::lse_chunk)
              detail::lse_fold_chunk(states[t], x + j, std::min(detail::lse_chunk, width - j), inverse);
            const auto label = static_cast<std::size_t>(labels[t]);
            if (label >= v0 && label < v0 + width) label_logits[t] = x[label - v0] * inverse;
          }
        },
        /*min_parallel=*/2);
  }
  detail::for_each_index(policy, tokens, [&](std::size_t t) {
    const double row_lse = states[t].log_sum_exp();
    log_probs[t] = static_cast<float>(static_cast<double>(label_logits[t]) - row_lse);
    if (!entropy.empty()) entropy[t] = static_cast<float>(states[t].entropy());
    if (!lse.empty()) lse[t] = static_cast<float>(row_lse);
  });
}

// The backward pass from both seeds: seeds.log_probs[t] = dL/dlogp_t (masked tokens: 0)
// and seeds.entropy[t] = dL/dH_t (empty: no entropy term); lse and, with an entropy
// seed, entropy from the forward pass (empty otherwise). Writes grad_hidden [tokens,
// hidden_size] and grad_weight [hidden_size, vocab] (overwritten, not accumulated).
template <exec::host_policy Policy>
void fused_linear_log_probs_backward(const Policy& policy, std::span<const float> hidden,
                                     std::span<const float> weight, std::size_t hidden_size,
                                     std::size_t vocab, std::span<const std::int64_t> labels,
                                     std::span<const float> lse, std::span<const float> entropy,
                                     const log_prob_seeds& seeds, std::span<float> grad_hidden,
                                     std::span<float> grad_weight,
                                     const fused_linear_options& options = {}) {
  const std::size_t tokens = labels.size();
  const std::span<const float> grad_log_probs = seeds.log_probs;
  const std::span<const float> grad_entropy = seeds.entropy;
  const bool entropy_term = !grad_entropy.empty();
  detail::validate_fused_linear(tokens, hidden_size, vocab, hidden, weight, options);
  detail::require_size(lse.size(), tokens, "lse", "one per label (from the forward pass)");
  detail::require_size(grad_log_probs.size(), tokens, "seeds.log_probs", "one per label");
  if (entropy_term) {
    detail::require_size(grad_entropy.size(), tokens, "seeds.entropy", "one per label, or empty");
    detail::require_size(entropy.size(), tokens, "entropy",
                         "one per label (from the forward pass) with an entropy seed");
  } else if (!entropy.empty()) {
    detail::fail("entropy", "is given without seeds.entropy: pass both or neither");
  }
  detail::require_size(grad_hidden.size(), tokens * hidden_size, "grad_hidden",
                       "tokens x hidden_size, row-major");
  detail::require_size(grad_weight.size(), hidden_size * vocab, "grad_weight",
                       "hidden_size x vocab, row-major");
  detail::require_labels_in_range(policy, labels, vocab);
  detail::require_finite(policy, lse, "lse");
  detail::require_finite(policy, grad_log_probs, "seeds.log_probs");
  detail::require_finite(policy, grad_entropy, "seeds.entropy");
  detail::require_finite(policy, entropy, "entropy");

  const auto h = static_cast<Eigen::Index>(hidden_size);
  const auto v = static_cast<Eigen::Index>(vocab);
  detail::for_each_index(policy, grad_weight.size(), [&](std::size_t i) { grad_weight[i] = 0.0f; });
  if (tokens == 0) return;
  const detail::row_major_map H(hidden.data(), static_cast<Eigen::Index>(tokens), h, Eigen::OuterStride<>(h));
  const detail::row_major_map W(weight.data(), h, v, Eigen::OuterStride<>(v));
  const float inverse = 1.0f / options.temperature;
  const std::size_t chunk = std::min(options.chunk_rows, tokens);
  const std::size_t vocab_tiles = detail::tiles_of(vocab, options.vocab_tile);
  detail::chunk_matrix scratch(static_cast<Eigen::Index>(chunk), v);
  // Each vocabulary tile's share of the chunk's grad_hidden: [chunk, H] per tile.
  std::vector<detail::chunk_matrix> hidden_shares(vocab_tiles,
                                                  detail::chunk_matrix(static_cast<Eigen::Index>(chunk), h));

  for (std::size_t first = 0; first < tokens; first += options.chunk_rows) {
    const std::size_t rows = std::min(options.chunk_rows, tokens - first);
    const auto r = static_cast<Eigen::Index>(rows);
    const auto hc = H.block(static_cast<Eigen::Index>(first), 0, r, h);
    // Per vocabulary tile: the logits again, dL/dlogits in place (with the 1/temperature
    // of the chain rule), then that tile's columns of grad_weight, slab by slab of 32
    // rows of hidden_size (each tile's columns are written by one task only), and its
    // share dZ_tile x W_tile^T of the chunk's grad_hidden.
    detail::for_each_index(
        policy, vocab_tiles,
        [&](std::size_t k) {
          const std::size_t v0 = k * options.vocab_tile;
          const std::size_t width = std::min(options.vocab_tile, vocab - v0);
          const auto c0 = static_cast<Eigen::Index>(v0);
          const auto w = static_cast<Eigen::Index>(width);
          auto tile = scratch.block(0, c0, r, w);
          tile.noalias() = hc * W.middleCols(c0, w);
          for (std::size_t i = 0; i < rows; ++i) {
            const std::size_t t = first + i;
            float* z = scratch.data() + i * vocab + v0;
            const float g = grad_log_probs[t] * inverse;
            const float row_lse = lse[t];
            if (entropy_term) {
              // -h p (log p + H), the entropy's own term; log p is this column's
              // log-softmax, the forward's shift z - lse.
              const float e = grad_entropy[t] * inverse;
              const float row_entropy = entropy[t];
              for (std::size_t j = 0; j < width; ++j) {
                float clamped;
                const float log_p = z[j] * inverse - row_lse;
                const float p = detail::exp_nonpositive(log_p, clamped);
                z[j] = -g * p - e * p * (log_p + row_entropy);
              }
            } else {
              for (std::size_t j = 0; j < width; ++j) {
                float clamped;
                const float p = detail::exp_nonpositive(z[j] * inverse - row_lse, clamped);
                z[j] = -g * p;
              }
            }
            const auto label = static_cast<std::size_t>(labels[t]);
            if (label >= v0 && label < v0 + width) z[label - v0] += g;
          }
          for (std::size_t s = 0; s < hidden_size; s += detail::fused_max_chunk) {
            const auto slab = static_cast<Eigen::Index>(std::min(detail::fused_max_chunk, hidden_size - s));
            detail::slab_map dw(grad_weight.data() + s * vocab + v0, slab, w, Eigen::OuterStride<>(v));
            dw.noalias() += hc.middleCols(static_cast<Eigen::Index>(s), slab).transpose() * tile;
          }
          hidden_shares[k].topRows(r).noalias() = tile * W.middleCols(c0, w).transpose();
        },
        /*min_parallel=*/2);
    // grad_hidden of the chunk: the tiles' shares added in tile order (the same sum for
    // any thread count).
    detail::for_each_index(
        policy, rows,
        [&](std::size_t i) {
          float* out = grad_hidden.data() + (first + i) * hidden_size;
          const auto row = static_cast<Eigen::Index>(i);
          for (std::size_t j = 0; j < hidden_size; ++j) out[j] = hidden_shares[0](row, static_cast<Eigen::Index>(j));
          for (std::size_t k = 1; k < vocab_tiles; ++k)
            for (std::size_t j = 0; j < hidden_size; ++j) out[j] += hidden_shares[k](row, static_cast<Eigen::Index>(j));
        },
        /*min_parallel=*/2);
  }
}

// The backward pass from dL/dlogp alone (no entropy term).
template <exec::host_policy Policy>
void fused_linear_log_probs_backward(const Policy& policy, std::span<const float> hidden,
                                     std::span<const float> weight, std::size_t hidden_size,
                                     std::size_t vocab, std::span<const std::int64_t> labels,
                                     std::span<const float> lse,
                                     std::span<const float> grad_log_probs,
                                     std::span<float> grad_hidden, std::span<float> grad_weight,
                                     const fused_linear_options& options = {}) {
  fused_linear_log_probs_backward(policy, hidden, weight, hidden_size, vocab, labels, lse,
                                  std::span<const float>{}, {.log_probs = grad_log_probs},
                                  grad_hidden, grad_weight, options);
}

}  // namespace cascade_rl
