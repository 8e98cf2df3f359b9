// fused_linear_log_probs and its backward pass (from dL/dlogp alone, and with an entropy
// seed dL/dH) against the materialised computation in double (logits, log-softmax,
// dL/dlogits, both matrix products), across chunk, slab and tile boundaries; the entropy
// seed's gradient against log_probs_backward of the materialised logits; the same bits
// under seq and par for any thread count.
// Needs Eigen 3.4 (Eigen3::Eigen) besides the usual test libraries.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/fused_linear_log_probs.hpp"
#include "cascade_rl/algorithms/log_probs_backward.hpp"

namespace {

namespace cr = cascade_rl;

struct problem {
  std::size_t tokens, hidden_size, vocab;
  std::vector<float> hidden, weight, grad_logp, grad_entropy;
  std::vector<std::int64_t> labels;
};

problem make_problem(std::size_t tokens, std::size_t hidden_size, std::size_t vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  problem p{tokens,
            hidden_size,
            vocab,
            std::vector<float>(tokens * hidden_size),
            std::vector<float>(hidden_size * vocab),
            std::vector<float>(tokens),
            std::vector<float>(tokens),
            std::vector<std::int64_t>(tokens)};
  for (auto& x : p.hidden) x = normal(rng);
  for (auto& x : p.weight) x = normal(rng) / std::sqrt(static_cast<float>(hidden_size)) * 2.0f;
  for (auto& g : p.grad_logp) g = normal(rng);
  for (auto& h : p.grad_entropy) h = normal(rng);
  p.grad_logp[1] = 0.0f;  // a masked token
  p.grad_entropy[1] = 0.0f;
  std::uniform_int_distribution<std::int64_t> pick(0, static_cast<std::int64_t>(vocab) - 1);
  for (auto& l : p.labels) l = pick(rng);
  return p;
}

struct reference {
  std::vector<double> logp, entropy, grad_hidden, grad_weight;
};

// dL/dz = (g (1[v = label] - p) - h p (log p + H)) / T, h = 0 without the entropy seed.
reference materialised(const problem& p, double temperature, bool with_entropy) {
  const std::size_t T = p.tokens, H = p.hidden_size, V = p.vocab;
  reference ref{std::vector<double>(T), std::vector<double>(T), std::vector<double>(T * H, 0.0),
                std::vector<double>(H * V, 0.0)};
  std::vector<double> z(V);
  for (std::size_t t = 0; t < T; ++t) {
    double m = -INFINITY;
    for (std::size_t v = 0; v < V; ++v) {
      double s = 0;
      for (std::size_t k = 0; k < H; ++k)
        s += static_cast<double>(p.hidden[t * H + k]) * static_cast<double>(p.weight[k * V + v]);
      z[v] = s / temperature;
      m = std::max(m, z[v]);
    }
    double sum = 0;
    for (double x : z) sum += std::exp(x - m);
    const double lse = m + std::log(sum);
    ref.logp[t] = z[static_cast<std::size_t>(p.labels[t])] - lse;
    for (double x : z) ref.entropy[t] -= std::exp(x - lse) * (x - lse);
    const double h = with_entropy ? p.grad_entropy[t] : 0.0;
    for (std::size_t v = 0; v < V; ++v) {
      const double log_p = z[v] - lse;
      const double prob = std::exp(log_p);
      const double dz =
          (p.grad_logp[t] * ((v == static_cast<std::size_t>(p.labels[t]) ? 1.0 : 0.0) - prob) -
           h * prob * (log_p + ref.entropy[t])) /
          temperature;
      for (std::size_t k = 0; k < H; ++k) {
        ref.grad_hidden[t * H + k] += dz * p.weight[k * V + v];
        ref.grad_weight[k * V + v] += dz * p.hidden[t * H + k];
      }
    }
  }
  return ref;
}

struct result {
  std::vector<float> logp, entropy, lse, grad_hidden, grad_weight;
};

template <class Policy>
result run(const Policy& policy, const problem& p, const cr::fused_linear_options& options,
           bool with_entropy = false) {
  result r{std::vector<float>(p.tokens), std::vector<float>(p.tokens), std::vector<float>(p.tokens),
           std::vector<float>(p.tokens * p.hidden_size), std::vector<float>(p.hidden_size * p.vocab)};
  cr::fused_linear_log_probs(policy, std::span<const float>(p.hidden), std::span<const float>(p.weight),
                             p.hidden_size, p.vocab, std::span<const std::int64_t>(p.labels),
                             std::span<float>(r.logp), std::span<float>(r.entropy),
                             std::span<float>(r.lse), options);
  if (with_entropy)
    cr::fused_linear_log_probs_backward(
        policy, std::span<const float>(p.hidden), std::span<const float>(p.weight), p.hidden_size,
        p.vocab, std::span<const std::int64_t>(p.labels), std::span<const float>(r.lse),
        std::span<const float>(r.entropy), {.log_probs = p.grad_logp, .entropy = p.grad_entropy},
        std::span<float>(r.grad_hidden), std::span<float>(r.grad_weight), options);
  else
    cr::fused_linear_log_probs_backward(
        policy, std::span<const float>(p.hidden), std::span<const float>(p.weight), p.hidden_size,
        p.vocab, std::span<const std::int64_t>(p.labels), std::span<const float>(r.lse),
        std::span<const float>(p.grad_logp), std::span<float>(r.grad_hidden),
        std::span<float>(r.grad_weight), options);
  return r;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tolerance,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tolerance * (1 + scale)) << what << "[" << i << "]";
}

TEST(FusedLinearLogProbs, MatchesTheMaterialisedComputation) {
  // 45 tokens: two chunks of 32; hidden 70: three slabs, two hidden tiles; vocab 5000:
  // three vocabulary tiles, the last partial.
  const problem p = make_problem(45, 70, 5000, 3);
  for (float temperature : {1.0f, 0.6f})
    for (const bool with_entropy : {false, true}) {
      SCOPED_TRACE(with_entropy ? "with the entropy seed" : "dL/dlogp alone");
      const reference ref = materialised(p, temperature, with_entropy);
      const result r = run(cr::exec::par, p, {.temperature = temperature}, with_entropy);
      expect_close(r.logp, ref.logp, 2e-5, "log_probs");
      expect_close(r.entropy, ref.entropy, 2e-5, "entropy");
      expect_close(r.grad_hidden, ref.grad_hidden, 2e-5, "grad_hidden");
      expect_close(r.grad_weight, ref.grad_weight, 2e-5, "grad_weight");
    }
}

TEST(FusedLinearLogProbs, AgreesWithLogProbsOfMaterialisedLogits) {
  const problem p = make_problem(40, 16, 3000, 4);
  std::vector<float> logits(p.tokens * p.vocab, 0.0f);
  for (std::size_t t = 0; t < p.tokens; ++t)
    for (std::size_t k = 0; k < p.hidden_size; ++k)
      for (std::size_t v = 0; v < p.vocab; ++v)
        logits[t * p.vocab + v] += p.hidden[t * p.hidden_size + k] * p.weight[k * p.vocab + v];
  std::vector<float> logp(p.tokens), entropy(p.tokens);
  cr::log_probs_from_logits(cr::exec::seq, {.vocab = p.vocab}, logits,
                            std::span<const std::int64_t>(p.labels), std::span<float>(logp),
                            std::span<float>(entropy));
  const result r = run(cr::exec::seq, p, {.chunk_rows = 7, .vocab_tile = 1000});
  for (std::size_t t = 0; t < p.tokens; ++t) {
    EXPECT_NEAR(r.logp[t], logp[t], 1e-4 * (1 + std::abs(logp[t])));
    EXPECT_NEAR(r.entropy[t], entropy[t], 1e-4 * (1 + std::abs(entropy[t])));
  }
}

// The fused path's dL/dlogits is log_probs_backward's on the materialised logits: the
// gradient w.r.t. hidden, dZ W^T, from either agrees to float rounding.
TEST(FusedLinearLogProbs, EntropySeedAgreesWithLogProbsBackward) {
  const problem p = make_problem(40, 16, 3000, 7);
  std::vector<float> logits(p.tokens * p.vocab, 0.0f);
  for (std::size_t t = 0; t < p.tokens; ++t)
    for (std::size_t k = 0; k < p.hidden_size; ++k)
      for (std::size_t v = 0; v < p.vocab; ++v)
        logits[t * p.vocab + v] += p.hidden[t * p.hidden_size + k] * p.weight[k * p.vocab + v];
  std::vector<float> grad_logits(logits.size());
  cr::log_probs_backward(
      cr::exec::seq, {.vocab = p.vocab}, logits, std::span<const std::int64_t>(p.labels),
      {.log_probs = p.grad_logp, .entropy = p.grad_entropy}, std::span<float>(grad_logits));
  std::vector<double> want(p.tokens * p.hidden_size, 0.0);
  for (std::size_t t = 0; t < p.tokens; ++t)
    for (std::size_t v = 0; v < p.vocab; ++v)
      for (std::size_t k = 0; k < p.hidden_size; ++k)
        want[t * p.hidden_size + k] +=
            static_cast<double>(grad_logits[t * p.vocab + v]) * p.weight[k * p.vocab + v];
  const result r = run(cr::exec::seq, p, {.chunk_rows = 7, .vocab_tile = 1000}, true);
  expect_close(r.grad_hidden, want, 1e-4, "grad_hidden");
}

TEST(FusedLinearLogProbs, SameBitsUnderSeqAndParForAnyThreadCount) {
  const problem p = make_problem(50, 40, 4500, 5);
  for (const bool with_entropy : {false, true}) {
    const result seq = run(cr::exec::seq, p, {}, with_entropy);
    for (int threads : {1, 2, 7}) {
      const result par = run(cr::exec::par.with_threads(threads), p, {}, with_entropy);
      EXPECT_EQ(par.logp, seq.logp);
      EXPECT_EQ(par.entropy, seq.entropy);
      EXPECT_EQ(par.grad_hidden, seq.grad_hidden);
      EXPECT_EQ(par.grad_weight, seq.grad_weight);
    }
  }
}

TEST(FusedLinearLogProbs, RefusesBadInput) {
  problem p = make_problem(4, 3, 10, 6);
  p.labels[2] = 10;
  std::vector<float> logp(4);
  try {
    cr::fused_linear_log_probs(cr::exec::par, std::span<const float>(p.hidden),
                               std::span<const float>(p.weight), 3, 10,
                               std::span<const std::int64_t>(p.labels), std::span<float>(logp), {}, {});
    FAIL() << "no error";
  } catch (const cr::error& e) {
    EXPECT_EQ(std::string(e.what()), "cascade_rl: labels[2]: is 10, outside [0, vocab = 10)");
  }
  p.labels[2] = 0;
  EXPECT_THROW(cr::fused_linear_log_probs(cr::exec::par, std::span<const float>(p.hidden),
                                          std::span<const float>(p.weight), 3, 10,
                                          std::span<const std::int64_t>(p.labels),
                                          std::span<float>(logp), {}, {}, {.chunk_rows = 33}),
               cr::error);
  EXPECT_THROW(cr::fused_linear_log_probs(cr::exec::par, std::span<const float>(p.hidden),
                                          std::span<const float>(p.weight), 4, 10,
                                          std::span<const std::int64_t>(p.labels),
                                          std::span<float>(logp), {}, {}),
               cr::error);
  // The backward pass: an entropy seed needs the forward's entropy, and the reverse; a NaN
  // seed is named with its index.
  std::vector<float> lse(4, 1.0f), entropy(4, 1.0f), grad_hidden(12), grad_weight(30);
  std::vector<float> seed(4, 0.5f);
  const auto backward = [&](std::span<const float> forward_entropy, cr::log_prob_seeds seeds) {
    cr::fused_linear_log_probs_backward(
        cr::exec::seq, std::span<const float>(p.hidden), std::span<const float>(p.weight), 3, 10,
        std::span<const std::int64_t>(p.labels), std::span<const float>(lse), forward_entropy,
        seeds, std::span<float>(grad_hidden), std::span<float>(grad_weight));
  };
  const auto message = [](const auto& f) -> std::string {
    try {
      f();
    } catch (const cr::error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message([&] { backward({}, {.log_probs = seed, .entropy = seed}); }).find("entropy"),
            std::string::npos);
  EXPECT_NE(message([&] {
              backward(entropy, {.log_probs = seed});
            }).find("entropy: is given without seeds.entropy"),
            std::string::npos);
  seed[3] = NAN;
  EXPECT_NE(message([&] {
              backward(entropy, {.log_probs = entropy, .entropy = seed});
            }).find("seeds.entropy[3]"),
            std::string::npos);
  EXPECT_EQ(message([&] { backward({}, {.log_probs = entropy}); }), "no error");
}

}  // namespace
