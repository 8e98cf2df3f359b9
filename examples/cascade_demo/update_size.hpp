#pragma once
// How far a stage moved the policy, and what that did to the domains it did not train:
//   softmax_kl        KL(p || q) of two next-token distributions given as logits;
//   update_kl         the mean per-token KL(before || after) along the greedy responses
//                     of `before` (what evaluation decodes), each position scored under
//                     both models: the size of an update on those prompts;
//   change_of_others  the mean score change, between a forgetting-matrix row and the one
//                     before it, of the domains that row's stage did not train;
//   worst_backward_transfer  the lowest per-domain backward transfer of a matrix.
// The observers: update_probe keeps the weights at each stage's start and, at its end,
// records the update's KL on the other domains' prompts beside their score change;
// adam_reset starts every stage with fresh Adam moments (and bias correction), as a
// new optimizer per stage would.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <cascade_rl/cascade/forgetting_matrix.hpp>
#include <cascade_rl/cascade/prompt.hpp>
#include <cascade_rl/cascade/stage_config.hpp>
#include <cascade_rl/core/checks.hpp>
#include <cascade_rl/core/error.hpp>

#include "eigen_policy.hpp"
#include "transformer.hpp"
#include "vocabulary.hpp"

namespace demo {

// KL(softmax(p) || softmax(q)) in nats, both shifted by their maximum before exp (the
// logits of a trained model reach the hundreds).
inline double softmax_kl(std::span<const double> p, std::span<const double> q) {
  if (p.empty()) cr::detail::fail("p_logits", "is empty");
  cr::detail::require_size(q.size(), p.size(), "q_logits", "one per entry of p_logits");
  for (std::size_t k = 0; k < p.size(); ++k)
    if (!std::isfinite(p[k]) || !std::isfinite(q[k]))
      cr::detail::fail_at(std::isfinite(p[k]) ? "q_logits" : "p_logits", k, "is not finite");
  const auto log_normaliser = [](std::span<const double> x) {
    const double top = *std::max_element(x.begin(), x.end());
    double s = 0;
    for (double v : x) s += std::exp(v - top);
    return top + std::log(s);
  };
  const double zp = log_normaliser(p), zq = log_normaliser(q);
  double kl = 0;
  for (std::size_t k = 0; k < p.size(); ++k) {
    const double lp = p[k] - zp;
    kl += std::exp(lp) * (lp - (q[k] - zq));
  }
  return std::max(kl, 0.0);  // rounding can leave -1e-17 where p == q
}

// Mean per-token KL(before || after) along `before`'s greedy responses (at most
// max_length tokens, ending at eos) to `prompts`; 0 for no prompts.
template <class T>
double update_kl(const lm_weights<T>& before, const lm_weights<T>& after, std::span<const cr::prompt> prompts,
                 int max_length, unsigned threads = 2) {
  if (!(before.shape == after.shape)) cr::detail::fail("after", "is a model of another shape than before");
  if (max_length < 1) cr::detail::fail("max_length", "must be at least 1");
  const int limit = std::min(max_length, before.shape.response_positions);
  std::vector<double> sums(work_chunks, 0.0);
  std::vector<std::size_t> counts(work_chunks, 0);
  for_chunks(work_chunks, threads, [&](std::size_t c) {
    const auto [first, last] = chunk_range(prompts.size(), c);
    row_vector<T> lb, la;
    std::vector<double> pb, pa;
    for (std::size_t i = first; i < last; ++i) {
      const std::vector<std::int32_t> prompt = encode(prompts[i].text);
      auto db = before.start(prompt);
      auto da = after.start(prompt);
      for (int j = 0; j < limit; ++j) {
        before.logits(db, lb);
        after.logits(da, la);
        pb.assign(lb.data(), lb.data() + lb.size());
        pa.assign(la.data(), la.data() + la.size());
        sums[c] += softmax_kl(pb, pa);
        ++counts[c];
        const auto y = static_cast<std::int32_t>(std::max_element(pb.begin(), pb.end()) - pb.begin());
        if (y == eos || j + 1 == limit) break;
        before.advance(db, y);
        after.advance(da, y);
      }
    }
  });
  double sum = 0;
  std::size_t count = 0;
  for (std::size_t c = 0; c < work_chunks; ++c) sum += sums[c], count += counts[c];  // in order: same bits on any thread count
  return count == 0 ? 0.0 : sum / static_cast<double>(count);
}

// Mean over the domains not in `trained` of score(row) - score(row - 1); nullopt when
// the stage trained every domain.
inline std::optional<double> change_of_others(const cr::forgetting_matrix& m, std::size_t row,
                                              const std::vector<std::string>& trained) {
  if (row == 0 || row >= m.rows()) cr::detail::fail("row", "must name a stage's row (1 .. rows - 1)");
  double sum = 0;
  std::size_t n = 0;
  for (std::size_t c = 0; c < m.domains().size(); ++c) {
    if (std::find(trained.begin(), trained.end(), m.domains()[c]) != trained.end()) continue;
    sum += m.score(row, c) - m.score(row - 1, c);
    ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / static_cast<double>(n);
}

// The lowest backward transfer of any domain (0 when none has one, or none fell).
inline double worst_backward_transfer(const cr::forgetting_matrix& m) {
  double lowest = 0;
  for (const auto& d : m.domains()) lowest = std::min(lowest, m.backward_transfer(d).value_or(0.0));
  return lowest;
}

// One stage's update beside what it did to the domains it did not train.
struct stage_update {
  std::string stage;
  double kl_others = 0;       // update_kl on the other domains' prompts
  double others_change = 0;   // change_of_others of its row
  double own_change = 0;      // mean change of its own domains' scores
};

class update_probe {
 public:
  // prompts_by_domain: the prompts the KL is measured on, per domain (domain, prompts).
  update_probe(const eigen_policy& policy, std::vector<std::pair<std::string, std::vector<cr::prompt>>> prompts_by_domain,
               std::vector<stage_update>& out, int max_length)
      : policy_(&policy), prompts_(std::move(prompts_by_domain)), out_(&out), max_length_(max_length),
        before_(std::make_shared<lm_weights<float>>()) {}

  void on_stage_begin(const cr::stage_config&, std::size_t) const { *before_ = policy_->weights(); }

  void on_stage_end(const cr::stage_config& c, const cr::forgetting_matrix& m) const {
    std::vector<cr::prompt> others;
    for (const auto& [d, ps] : prompts_)
      if (std::find(c.domains.begin(), c.domains.end(), d) == c.domains.end()) others.insert(others.end(), ps.begin(), ps.end());
    if (others.empty()) return;  // a stage of every domain has no others
    const std::size_t row = m.rows() - 1;
    stage_update u;
    u.stage = c.name;
    u.kl_others = update_kl(*before_, policy_->weights(), others, max_length_);
    u.others_change = change_of_others(m, row, c.domains).value_or(0.0);
    double own = 0;
    for (const auto& d : c.domains) own += m.score(row, d) - m.score(row - 1, d);
    u.own_change = c.domains.empty() ? 0.0 : own / static_cast<double>(c.domains.size());
    out_->push_back(u);
  }

 private:
  const eigen_policy* policy_;
  std::vector<std::pair<std::string, std::vector<cr::prompt>>> prompts_;
  std::vector<stage_update>* out_;
  int max_length_;
  std::shared_ptr<lm_weights<float>> before_;  // observers are called const
};

class adam_reset {
 public:
  explicit adam_reset(eigen_policy& policy) : policy_(&policy) {}
  void on_stage_begin(const cr::stage_config&, std::size_t) const {
    auto& w = policy_->weights();
    std::fill(w.m.begin(), w.m.end(), 0.0f);
    std::fill(w.v.begin(), w.v.end(), 0.0f);
    w.adam_steps = 0;
  }

 private:
  eigen_policy* policy_;
};

}  // namespace demo
