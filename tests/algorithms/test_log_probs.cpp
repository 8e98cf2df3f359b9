// log_probs_from_logits against a double-precision log-softmax, for fp32 and bf16
// logits, with padded rows, -inf logits, temperatures, and vocabularies that cross the
// chunk size; the same bits under seq and par for any thread count; refused labels.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/log_probs.hpp"
#include "support/log_softmax_reference.hpp"

namespace {
namespace log_probs_cases {  // this file's names, apart in the area's unity build

namespace cr = cascade_rl;

constexpr float minus_inf = -std::numeric_limits<float>::infinity();

using cascade_rl::testing::reference_row;

template <class L>
L make(float v) {
  if constexpr (std::is_same_v<L, float>)
    return v;
  else
    return cr::bfloat16::from_float(v);
}

struct batch {
  std::size_t rows, vocab, stride;
  std::vector<float> values;  // the logits as float, [rows, stride]
  std::vector<std::int64_t> labels;
};

batch random_batch(std::size_t rows, std::size_t vocab, float scale, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::uniform_int_distribution<std::int64_t> pick(0, static_cast<std::int64_t>(vocab) - 1);
  batch b{rows, vocab, vocab + 5, {}, std::vector<std::int64_t>(rows)};
  b.values.resize(rows * b.stride);
  for (auto& v : b.values) v = normal(rng);
  for (std::size_t r = 0; r < rows; ++r) {
    if (vocab > 4) b.values[r * b.stride + 1] = minus_inf;  // a masked-out vocabulary entry
    b.labels[r] = pick(rng);
    if (vocab > 4 && b.labels[r] == 1) b.labels[r] = 0;
  }
  return b;
}

template <class L>
void check_against_reference(std::size_t rows, std::size_t vocab, float temperature, float scale) {
  const batch b = random_batch(rows, vocab, scale, rows * 131 + vocab);
  std::vector<L> logits(b.values.size());
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = make<L>(b.values[i]);
  std::vector<float> logp(rows), entropy(rows);
  cr::log_probs_from_logits(cr::exec::par, {.vocab = vocab, .row_stride = b.stride},
                            std::span<const L>(logits), std::span<const std::int64_t>(b.labels),
                            std::span<float>(logp), std::span<float>(entropy), temperature);
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<double> x(vocab);
    for (std::size_t v = 0; v < vocab; ++v)
      x[v] = static_cast<double>(static_cast<float>(logits[r * b.stride + v]) * (1.0f / temperature));
    double want_logp = 0, want_entropy = 0;
    reference_row(x, b.labels[r], want_logp, want_entropy);
    EXPECT_NEAR(logp[r], want_logp, 2e-5 * (1 + std::abs(want_logp))) << "row " << r << " V " << vocab;
    EXPECT_NEAR(entropy[r], want_entropy, 2e-5 * (1 + std::abs(want_entropy)))
        << "row " << r << " V " << vocab;
  }
}

TEST(LogProbs, Float32MatchesDoubleReference) {
  for (std::size_t vocab : {1, 7, 16, 1000, 1024, 1025, 32771}) check_against_reference<float>(5, vocab, 1.0f, 3.0f);
  check_against_reference<float>(3, 5000, 0.7f, 3.0f);
  check_against_reference<float>(3, 5000, 1.0f, 40.0f);  // peaked rows, the maximum moves
}

TEST(LogProbs, Bfloat16MatchesDoubleReference) {
  for (std::size_t vocab : {3, 64, 4099}) check_against_reference<cr::bfloat16>(4, vocab, 1.0f, 3.0f);
}

TEST(LogProbs, SameBitsUnderSeqAndParForAnyThreadCount) {
  const batch b = random_batch(37, 3000, 3.0f, 9);
  std::vector<float> seq_logp(b.rows), seq_entropy(b.rows);
  cr::log_probs_from_logits(cr::exec::seq, {.vocab = b.vocab, .row_stride = b.stride}, b.values,
                            std::span<const std::int64_t>(b.labels), std::span<float>(seq_logp),
                            std::span<float>(seq_entropy));
  for (int threads : {1, 2, 7}) {
    std::vector<float> logp(b.rows), entropy(b.rows);
    cr::log_probs_from_logits(
        cr::exec::par.with_threads(threads), {.vocab = b.vocab, .row_stride = b.stride}, b.values,
        std::span<const std::int64_t>(b.labels), std::span<float>(logp), std::span<float>(entropy));
    for (std::size_t r = 0; r < b.rows; ++r) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(logp[r]), std::bit_cast<std::uint32_t>(seq_logp[r]));
      EXPECT_EQ(std::bit_cast<std::uint32_t>(entropy[r]), std::bit_cast<std::uint32_t>(seq_entropy[r]));
    }
  }
}

TEST(LogProbs, EntropyIsOptionalAndEdgeRowsBehave) {
  // Row 0 uniform, row 1 one-hot by -inf, row 2 holds a NaN.
  const std::size_t vocab = 4;
  std::vector<float> logits = {0, 0, 0, 0, minus_inf, 2, minus_inf, minus_inf, 1, std::nanf(""), 0, 0};
  std::vector<std::int64_t> labels = {2, 1, 0};
  std::vector<float> logp(3), entropy(3);
  cr::log_probs_from_logits(cr::exec::seq, {.vocab = vocab}, logits,
                            std::span<const std::int64_t>(labels), std::span<float>(logp),
                            std::span<float>(entropy));
  EXPECT_NEAR(logp[0], -std::log(4.0), 1e-6);
  EXPECT_NEAR(entropy[0], std::log(4.0), 1e-6);
  EXPECT_NEAR(logp[1], 0.0, 1e-6);
  EXPECT_NEAR(entropy[1], 0.0, 1e-6);
  EXPECT_TRUE(std::isnan(logp[2]));
  std::vector<float> only_logp(3);
  cr::log_probs_from_logits(cr::exec::par, {.vocab = vocab}, logits,
                            std::span<const std::int64_t>(labels), std::span<float>(only_logp), {});
  EXPECT_EQ(only_logp[0], logp[0]);
}

TEST(LogProbs, RefusesBadInputNamingTheFirstIndex) {
  constexpr std::size_t vocab = 8;
  std::vector<float> logits(4 * vocab, 0.0f);
  std::vector<float> logp(4);
  const auto message = [&](std::vector<std::int64_t> labels, std::size_t stride = 8,
                           float temperature = 1.0f) {
    try {
      cr::log_probs_from_logits(cr::exec::par, {.vocab = vocab, .row_stride = stride}, logits,
                                std::span<const std::int64_t>(labels),
                                std::span<float>(logp.data(), labels.size()), {}, temperature);
    } catch (const cr::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({0, 3, 8, -1}), "cascade_rl: labels[2]: is 8, outside [0, vocab = 8)");
  EXPECT_EQ(message({0, -1, 9, 1}), "cascade_rl: labels[1]: is -1, outside [0, vocab = 8)");
  EXPECT_NE(message({0, 1}, 4).find("row_stride"), std::string::npos);
  EXPECT_NE(message({0, 1}, vocab, 0.0f).find("temperature"), std::string::npos);
  EXPECT_NE(message({0, 1, 2, 3, 4}).find("logits"), std::string::npos);
  EXPECT_EQ(message({0, 1, 2, 3}), "no error");
}

TEST(LogProbs, Bfloat16RoundsToNearestEven) {
  EXPECT_EQ(cr::bfloat16::from_float(1.0f).bits, 0x3f80);
  EXPECT_EQ(cr::bfloat16::from_float(1.0f).to_float(), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even 1.
  EXPECT_EQ(cr::bfloat16::from_float(1.0f + 1.0f / 256).to_float(), 1.0f);
  EXPECT_EQ(cr::bfloat16::from_float(1.0f + 3.0f / 256).to_float(), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(cr::bfloat16::from_float(std::nanf("")).to_float()));
  EXPECT_EQ(cr::bfloat16::from_float(minus_inf).to_float(), minus_inf);
}

}  // namespace log_probs_cases
}  // namespace
