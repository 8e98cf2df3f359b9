// log_probs_backward: dL/dlogits from the seeds dL/dlogp and dL/dH, against a double
// softmax and central differences of it, bit-identical for any thread count, and veRL's
// entropy loss (compute_entropy_loss: its value, its gradient w.r.t. the logits, and the
// actor/entropy metric) from verl_core_algos_v2.json.

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/algorithms/entropy_loss.hpp"
#include "cascade_rl/algorithms/log_probs.hpp"
#include "cascade_rl/algorithms/log_probs_backward.hpp"
#include "cascade_rl/algorithms/loss_aggregation.hpp"
#include "cascade_rl/core/exec.hpp"
#include "cascade_rl/presets/verl_losses.hpp"
#include "support/expect_error.hpp"
#include "support/reference.hpp"

namespace {
namespace log_probs_backward_cases {  // this file's names, apart in the area's unity build

namespace cr = cascade_rl;
namespace exec = cr::exec;

// L(z) = g log softmax(z / T)[label] + h H(softmax(z / T)) in double.
double objective(const std::vector<double>& z, std::size_t label, double g, double h, double t) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : z) m = std::max(m, x / t);
  double s = 0;
  for (double x : z) s += std::exp(x / t - m);
  const double lse = m + std::log(s);
  double entropy = 0;
  for (double x : z) {
    const double log_p = x / t - lse;
    if (std::isfinite(log_p)) entropy -= std::exp(log_p) * log_p;
  }
  return g * (z[label] / t - lse) + h * entropy;
}

TEST(LogProbsBackward, MatchesCentralDifferencesOfADoubleSoftmax) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const float temperature : {1.0f, 0.7f}) {
    const std::size_t rows = 3, vocab = 37;
    std::vector<float> logits(rows * vocab);
    for (float& x : logits) x = normal(rng);
    logits[5] = -std::numeric_limits<float>::infinity();  // contributes 0, not NaN
    const std::vector<std::int64_t> labels{2, 36, 0};
    const std::vector<float> g{-0.75f, 0.5f, 0.0f}, h{0.25f, 0.0f, -1.5f};
    std::vector<float> grad(rows * vocab, -7.0f);
    cr::log_probs_backward(exec::seq, {.vocab = vocab}, logits, labels,
                           {.log_probs = g, .entropy = h}, grad, temperature);
    for (std::size_t r = 0; r < rows; ++r) {
      std::vector<double> z(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
      for (std::size_t v = 0; v < vocab; ++v) {
        if (!std::isfinite(z[v])) {
          EXPECT_EQ(grad[r * vocab + v], 0.0f) << "a -inf logit";
          continue;
        }
        const double step = 1e-5;
        std::vector<double> up = z, down = z;
        up[v] += step;
        down[v] -= step;
        const auto label = static_cast<std::size_t>(labels[r]);
        const double numeric = (objective(up, label, g[r], h[r], temperature) -
                                objective(down, label, g[r], h[r], temperature)) /
                               (2 * step);
        // Our gradient is the float softmax's (a few float ulps of p and log p) rounded to
        // float; the central difference's error is O(step^2) plus cancellation, 1e-9 here.
        EXPECT_NEAR(grad[r * vocab + v], numeric, 2e-6 * (1 + std::abs(numeric)))
            << "row " << r << " logit " << v << " T " << temperature;
      }
    }
  }
}

TEST(LogProbsBackward, SameBitsForAnyThreadCountFloatAndBfloat16) {
  const std::size_t rows = 70, vocab = 3000, stride = 3008;
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(rows * stride, 0.0f);
  std::vector<cr::bfloat16> half(rows * stride);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    logits[i] = normal(rng);
    half[i] = cr::bfloat16::from_float(logits[i]);
  }
  std::vector<std::int64_t> labels(rows);
  std::vector<float> g(rows), h(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    labels[r] = static_cast<std::int64_t>(rng() % vocab);
    g[r] = normal(rng);
    h[r] = normal(rng);
  }
  const cr::logits_layout layout{.vocab = vocab, .row_stride = stride};
  const auto run = [&](const auto& policy, const auto& x) {
    std::vector<float> grad(rows * stride, 0.0f);
    cr::log_probs_backward(policy, layout, x, labels, {.log_probs = g, .entropy = h}, grad, 1.3f);
    return grad;
  };
  const auto seq = run(exec::seq, logits);
  const auto seq_half = run(exec::seq, half);
  for (const auto& policy : {exec::par.with_threads(1), exec::par.with_threads(3), exec::par}) {
    const auto par = run(policy, logits);
    EXPECT_EQ(0, std::memcmp(par.data(), seq.data(), seq.size() * sizeof(float)));
    const auto par_half = run(policy, half);
    EXPECT_EQ(0, std::memcmp(par_half.data(), seq_half.data(), seq.size() * sizeof(float)));
  }
  // Each row's gradient sums to g - h * 0 ... the log-prob part sums to 0 over the
  // vocabulary (sum (1[v = label] - p) = 0) and so does the entropy part (sum p (log p +
  // H) = 0): the whole row sums to 0 up to rounding.
  for (std::size_t r = 0; r < rows; ++r) {
    double sum = 0, scale = 0;
    for (std::size_t v = 0; v < vocab; ++v) {
      sum += seq[r * stride + v];
      scale += std::abs(seq[r * stride + v]);
    }
    EXPECT_LE(std::abs(sum), 1e-5 * scale) << r;
    for (std::size_t v = vocab; v < stride; ++v) EXPECT_EQ(seq[r * stride + v], 0.0f);
  }
}

TEST(LogProbsBackward, RefusesBadInputByName) {
  const std::vector<float> logits(8, 0.0f);
  const std::vector<std::int64_t> labels{1, 3};
  const std::vector<float> g{1, 1}, h{0, 0};
  std::vector<float> grad(8);
  using cr::testing::expect_error_naming;
  expect_error_naming(
      [&] {
        cr::log_probs_backward(exec::seq, {.vocab = 4}, logits, std::vector<std::int64_t>{1, 4},
                               {.log_probs = g}, grad);
      },
      "labels[1]");
  std::vector<float> short_grad(7);
  expect_error_naming(
      [&] {
        cr::log_probs_backward(exec::seq, {.vocab = 4}, logits, labels, {.log_probs = g},
                               short_grad);
      },
      "grad_logits");
  const std::vector<float> bad{1, std::nanf("")};
  expect_error_naming(
      [&] {
        cr::log_probs_backward(exec::seq, {.vocab = 4}, logits, labels, {.log_probs = bad}, grad);
      },
      "seeds.log_probs[1]");
  expect_error_naming(
      [&] {
        cr::log_probs_backward(exec::seq, {.vocab = 4}, logits, labels,
                               {.log_probs = g, .entropy = std::vector<float>{0}}, grad);
      },
      "seeds.entropy");
  expect_error_naming(
      [&] {
        cr::log_probs_backward(exec::seq, {.vocab = 4}, logits, labels, {.log_probs = g}, grad,
                               0.0f);
      },
      "temperature");
}

// The rounding veRL's float32 entropy carries, to first order. entropy_from_logits takes
// H = logsumexp(z) - sum p z: both terms are of the size of the logits while H may be
// small (a peaked row: |z| = 30, H = 0.017), so float32 cancellation leaves an absolute
// error up to eps (|lse| + V sum p |z|) (the sum of V products, each rounded). The
// gradient -h p_v (log p_v + H) inherits it through log p_v + H, and p_v's own relative
// error eps (|z_v| + |lse|) through the factor |log p_v + H|. Ours is double inside and
// matches an exact softmax to float resolution; the bound says where veRL's is coarser.
struct entropy_rounding {
  std::vector<double> entropy;  // per row
  std::vector<double> grad;     // per logit, per unit of |h|
};

entropy_rounding verl_entropy_rounding(const std::vector<float>& logits, std::size_t rows,
                                       std::size_t vocab) {
  constexpr double eps = 0x1p-24;
  entropy_rounding r{std::vector<double>(rows), std::vector<double>(rows * vocab)};
  for (std::size_t i = 0; i < rows; ++i) {
    const float* z = logits.data() + i * vocab;
    double m = -std::numeric_limits<double>::infinity(), s = 0, pz = 0, entropy = 0;
    for (std::size_t v = 0; v < vocab; ++v) m = std::max(m, static_cast<double>(z[v]));
    for (std::size_t v = 0; v < vocab; ++v) s += std::exp(z[v] - m);
    const double lse = m + std::log(s);
    for (std::size_t v = 0; v < vocab; ++v) {
      const double p = std::exp(z[v] - lse);
      pz += p * std::abs(z[v]);
      entropy -= p * (z[v] - lse);
    }
    const double cancellation = eps * (std::abs(lse) + static_cast<double>(vocab) * pz);
    r.entropy[i] = cancellation;
    for (std::size_t v = 0; v < vocab; ++v) {
      const double p = std::exp(z[v] - lse);
      const double log_p_plus_h = z[v] - lse + entropy;
      r.grad[i * vocab + v] =
          p * (cancellation + eps * (std::abs(z[v]) + std::abs(lse)) * std::abs(log_p_plus_h));
    }
  }
  return r;
}

// [N][T][V] values of the reference, row-major.
template <class T>
std::vector<T> flatten3(const nlohmann::json& values) {
  std::vector<T> out;
  for (const auto& row : values)
    for (const auto& token : row)
      for (const auto& x : token) out.push_back(x.get<T>());
  return out;
}

void expect_within(std::span<const float> ours, const std::vector<double>& theirs,
                   const std::vector<double>& bound, const std::string& what) {
  ASSERT_EQ(ours.size(), theirs.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const double tolerance =
        cr::testing::reference_atol + cr::testing::reference_rtol * std::abs(theirs[i]) + bound[i];
    if (!(std::abs(ours[i] - theirs[i]) <= tolerance) && reported++ < 5)
      ADD_FAILURE() << what << " [" << i << "]: " << ours[i] << " vs " << theirs[i]
                    << ", tolerance " << tolerance;
  }
}

// veRL's compute_entropy_loss(logits, mask, mode) = agg_loss(entropy_from_logits(logits),
// mask, mode) (seq-mean-token-sum-norm divides by T) and its gradient w.r.t. the logits;
// the trainer's actor/entropy metric divides by its loss_scale_factor instead. Ours:
// log_probs_from_logits' entropy, entropy_loss (which gives dL/dH per token) and
// log_probs_backward with those seeds.
TEST(LogProbsBackward, VerlEntropyLossValueGradientAndMetric) {
  namespace verl = cr::presets::verl;
  const auto reference = cr::testing::load_reference("verl_core_algos_v2.json");
  const auto& entropy = reference["entropy"];
  std::size_t cases = 0;
  double largest_bound = 0;
  for (const auto& c : entropy["cases"]) {
    const auto& b = entropy["batches"][c["batch"].get<std::string>()];
    const auto batch = cr::testing::padded_from_mask(b["response_mask"]);
    const auto layout = batch.layout();
    const std::size_t rows = batch.rows * batch.width, vocab = b["V"].get<std::size_t>();
    const std::vector<float> logits = flatten3<float>(b["logits"]);
    const entropy_rounding rounding = verl_entropy_rounding(logits, rows, vocab);
    for (const double e : rounding.entropy) largest_bound = std::max(largest_bound, e);
    const std::vector<std::int64_t> labels(rows, 0);
    std::vector<float> log_probs(rows), token_entropy(rows);
    cr::log_probs_from_logits(exec::seq, {.vocab = vocab}, logits, labels, log_probs,
                              token_entropy);
    const std::string context =
        "entropy " + c["batch"].get<std::string>() + " " + c["loss_agg_mode"].get<std::string>();
    expect_within(token_entropy, cr::testing::flatten<double>(b["token_entropy"]), rounding.entropy,
                  context + " token entropy");

    const auto mode = verl::loss_agg_mode(c["loss_agg_mode"].get<std::string>());
    std::vector<float> dloss_dentropy(rows);
    const auto normalizer = verl::single_rank_normalizer(exec::seq, layout, mode, batch.width);
    const double loss = cr::entropy_loss(exec::seq, layout, std::span<const float>(token_entropy),
                                         dloss_dentropy, normalizer, mode);
    // veRL's bonus, -entropy_coeff times the loss: its seed is the coefficient times c_t,
    // the value unchanged.
    std::vector<float> bonus_seed(rows);
    EXPECT_EQ(cr::entropy_loss(exec::seq, layout, std::span<const float>(token_entropy), bonus_seed,
                               normalizer, mode, -0.01),
              loss);
    for (std::size_t t = 0; t < rows; ++t)
      EXPECT_EQ(bonus_seed[t], static_cast<float>(static_cast<double>(dloss_dentropy[t]) *
                                                  static_cast<double>(-0.01f)))
          << context << " token " << t;
    double loss_bound = 0;
    for (std::size_t t = 0; t < rows; ++t)
      loss_bound += std::abs(dloss_dentropy[t]) * rounding.entropy[t];
    cr::testing::expect_close(loss, c["entropy_loss"].get<double>(), context + " loss",
                              cr::testing::reference_rtol,
                              cr::testing::reference_atol + loss_bound);

    const std::vector<float> no_log_prob_seed(rows, 0.0f);
    std::vector<float> grad(rows * vocab, -7.0f);
    cr::log_probs_backward(exec::seq, {.vocab = vocab}, logits, labels,
                           {.log_probs = no_log_prob_seed, .entropy = dloss_dentropy}, grad);
    std::vector<double> grad_bound(rows * vocab);
    for (std::size_t i = 0; i < grad_bound.size(); ++i)
      grad_bound[i] = std::abs(dloss_dentropy[i / vocab]) * rounding.grad[i];
    expect_within(grad, flatten3<double>(c["grad_logits"]), grad_bound, context + " grad_logits");

    const auto& metric = c["actor_entropy_metric"];
    std::vector<float> metric_weights(rows);
    const double value = cr::entropy_loss(
        exec::seq, layout, std::span<const float>(token_entropy), metric_weights,
        verl::single_rank_normalizer(exec::seq, layout, mode,
                                     metric["loss_scale_factor"].get<std::size_t>()),
        mode);
    double metric_bound = 0;
    for (std::size_t t = 0; t < rows; ++t)
      metric_bound += std::abs(metric_weights[t]) * rounding.entropy[t];
    cr::testing::expect_close(value, metric["value"].get<double>(), context + " actor/entropy",
                              cr::testing::reference_rtol,
                              cr::testing::reference_atol + metric_bound);
    ++cases;
  }
  EXPECT_EQ(cases, 10u);
  // The peaked row is where the bound matters; elsewhere it is below the file's atol.
  EXPECT_GT(largest_bound, cr::testing::reference_atol);
}

// entropy_loss on a hand-computed batch; it names a bad coefficient, and a bad entropy by
// its first index.
TEST(EntropyLoss, RefusesNamingArgumentAndIndex) {
  using cr::testing::expect_error_naming;
  const std::vector<std::int64_t> offsets{0, 2, 4};
  const cr::token_layout layout(offsets);
  const auto normalizer =
      cr::local_loss_counts(exec::seq, layout).normalizer(cr::loss_aggregation::token_mean);
  std::vector<float> entropy{0.5f, 0.25f, 1.0f, 2.0f}, seed(4);
  const auto run = [&](double coefficient) {
    return cr::entropy_loss(exec::seq, layout, std::span<const float>(entropy), seed, normalizer,
                            cr::loss_aggregation::token_mean, coefficient);
  };
  EXPECT_EQ(run(2.0), (0.5 + 0.25 + 1.0 + 2.0) / 4);
  EXPECT_EQ(seed, std::vector<float>(4, 0.5f));  // 2 * c_t, c_t = 1/4
  expect_error_naming([&] { run(NAN); }, "coefficient");
  std::vector<float> short_seed(3);
  expect_error_naming(
      [&] {
        (void)cr::entropy_loss(exec::seq, layout, std::span<const float>(entropy), short_seed, normalizer,
                               cr::loss_aggregation::token_mean, 1.0);
      },
      "grad_entropy_out", "one per token");
  entropy[2] = INFINITY;
  expect_error_naming([&] { run(1.0); }, "entropy[2]");
  entropy.pop_back();
  expect_error_naming([&] { run(1.0); }, "entropy", "one per token");
}

}  // namespace log_probs_backward_cases
}  // namespace
