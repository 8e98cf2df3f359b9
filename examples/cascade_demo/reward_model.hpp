#pragma once
// RLHF in miniature. A hidden "human" preference over chat replies (gold_chat_score),
// synthetic preference pairs labelled by it through a Bradley-Terry draw
// (P(a preferred to b) = sigmoid(beta * (u(a) - u(b)))), and a Bradley-Terry reward
// model, linear in hand-made features of (prompt, reply), trained on those pairs by
// logistic regression. The RLHF stage trains against the reward model; the chat
// evaluation scores with the gold preference (the stage's own evaluation reward), so a
// policy that games the model shows.
//
// Prompts are "chat greet" or "chat help". The gold preference likes: a greeting first
// word for "greet", the word "help" for "help", politeness (please or thanks), no rude
// word (bad, no), no repeated word, and many words: it is chatty. Instruction-following
// prompts put constraints on the same replies (a length of two to five, a first and a
// last word, a small set of allowed words), so what RLHF rewards and what IF-RL rewards
// pull the shared model in different directions.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "vocabulary.hpp"

namespace demo {

inline const std::array<std::string, 10>& chat_words() {
  static const std::array<std::string, 10> w = {"hi", "hello", "please", "thanks", "sure",
                                                "ok", "sorry", "bad", "no", "help"};
  return w;
}

// The reply words (end-of-sequence dropped); topic 0 greet, 1 help.
inline int chat_topic(std::string_view prompt_text) {
  return prompt_text.find("help") != std::string_view::npos ? 1 : 0;
}

inline std::vector<std::int32_t> strip_eos(std::span<const std::int32_t> tokens) {
  std::vector<std::int32_t> out(tokens.begin(), tokens.end());
  if (!out.empty() && out.back() == eos) out.pop_back();
  return out;
}

// The hidden utility, before scaling: up to 1 for the topic, 1 for politeness, 0.25
// per distinct polite word (eight at most), minus 1 for rudeness and 0.5 per repeat.
inline double gold_chat_utility(int topic, std::span<const std::int32_t> reply_tokens) {
  const std::vector<std::int32_t> r = strip_eos(reply_tokens);
  if (r.empty()) return -2.0;
  const auto has = [&](const char* w) { return std::find(r.begin(), r.end(), token_id(w)) != r.end(); };
  double u = 0.0;
  if (topic == 0 && (r.front() == token_id("hi") || r.front() == token_id("hello"))) u += 1.0;
  if (topic == 1 && has("help")) u += 1.0;
  if (has("please") || has("thanks")) u += 1.0;
  if (has("bad") || has("no")) u -= 1.0;
  std::vector<std::int32_t> sorted = r;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  const auto distinct = static_cast<double>(sorted.size());
  const double rude = static_cast<double>(std::count(sorted.begin(), sorted.end(), token_id("bad")) +
                                          std::count(sorted.begin(), sorted.end(), token_id("no")));
  u -= 0.5 * (static_cast<double>(r.size()) - distinct);
  u += 0.25 * (distinct - rude);
  return u;
}

// The chat evaluation score in [0, 1]: the gold utility clamped to [0, 4], quartered
// (4: on topic, polite, all eight polite words once).
inline double gold_chat_score(int topic, std::span<const std::int32_t> reply_tokens) {
  return std::clamp(gold_chat_utility(topic, reply_tokens), 0.0, 4.0) / 4.0;
}

// Features of (topic, reply): per topic, "contains word w" and "first word is w" for
// the ten chat words; then shared: the number of words, repeated words, non-chat words,
// bias.
inline constexpr std::size_t chat_feature_count = 2 * 20 + 4;

inline std::array<double, chat_feature_count> chat_features(int topic, std::span<const std::int32_t> reply_tokens) {
  std::array<double, chat_feature_count> f{};
  const std::vector<std::int32_t> r = strip_eos(reply_tokens);
  const std::size_t base = static_cast<std::size_t>(topic) * 20;
  std::size_t foreign = 0;
  for (std::size_t k = 0; k < chat_words().size(); ++k) {
    const std::int32_t w = token_id(chat_words()[k]);
    if (std::find(r.begin(), r.end(), w) != r.end()) f[base + k] = 1.0;
    if (!r.empty() && r.front() == w) f[base + 10 + k] = 1.0;
  }
  for (std::int32_t t : r) {
    bool chat = false;
    for (const auto& w : chat_words()) chat = chat || t == token_id(w);
    foreign += !chat;
  }
  std::vector<std::int32_t> sorted = r;
  std::sort(sorted.begin(), sorted.end());
  const auto distinct = static_cast<double>(std::unique(sorted.begin(), sorted.end()) - sorted.begin());
  f[40] = static_cast<double>(r.size());
  f[41] = static_cast<double>(r.size()) - distinct;
  f[42] = static_cast<double>(foreign);
  f[43] = 1.0;
  return f;
}

struct preference_pair {
  int topic = 0;
  std::vector<std::int32_t> chosen{}, rejected{};
};

// A random reply of 1-10 chat words (the raw material of the preference data).
inline std::vector<std::int32_t> random_chat_reply(std::mt19937_64& rng) {
  std::vector<std::int32_t> r;
  const int n = 1 + static_cast<int>(rng() % 10);
  for (int i = 0; i < n; ++i) r.push_back(token_id(chat_words()[rng() % chat_words().size()]));
  return r;
}

// Pairs of random replies, the preferred one drawn by Bradley-Terry from the gold
// utility with sharpness beta (label noise: close replies are often mislabelled).
inline std::vector<preference_pair> make_preference_pairs(std::size_t n, std::uint64_t seed, double beta = 3.0) {
  std::mt19937_64 rng(seed);
  std::vector<preference_pair> out;
  out.reserve(n);
  while (out.size() < n) {
    const int topic = static_cast<int>(rng() % 2);
    auto a = random_chat_reply(rng), b = random_chat_reply(rng);
    const double ua = gold_chat_utility(topic, a), ub = gold_chat_utility(topic, b);
    const double p_a = 1.0 / (1.0 + std::exp(-beta * (ua - ub)));
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    if (u < p_a) out.push_back({topic, std::move(a), std::move(b)});
    else out.push_back({topic, std::move(b), std::move(a)});
  }
  return out;
}

// r(x, y) = w . features(x, y); trained so that sigmoid(r(chosen) - r(rejected)) fits
// the pairs (the Bradley-Terry likelihood), by full-batch gradient ascent with a small
// L2 penalty.
class bt_reward_model {
 public:
  [[nodiscard]] double score(int topic, std::span<const std::int32_t> reply) const {
    const auto f = chat_features(topic, reply);
    double s = 0.0;
    for (std::size_t k = 0; k < f.size(); ++k) s += w_[k] * f[k];
    return s;
  }

  // The training reward of RLHF: sigmoid(score), in (0, 1).
  [[nodiscard]] double probability(int topic, std::span<const std::int32_t> reply) const {
    return 1.0 / (1.0 + std::exp(-score(topic, reply)));
  }

  // Returns the final mean negative log-likelihood.
  double train(const std::vector<preference_pair>& pairs, int epochs = 300, double lr = 0.5, double l2 = 1e-3) {
    std::vector<std::array<double, chat_feature_count>> diff(pairs.size());
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const auto a = chat_features(pairs[i].topic, pairs[i].chosen);
      const auto b = chat_features(pairs[i].topic, pairs[i].rejected);
      for (std::size_t k = 0; k < a.size(); ++k) diff[i][k] = a[k] - b[k];
    }
    double nll = 0.0;
    for (int e = 0; e < epochs; ++e) {
      std::array<double, chat_feature_count> grad{};
      nll = 0.0;
      for (const auto& d : diff) {
        double margin = 0.0;
        for (std::size_t k = 0; k < d.size(); ++k) margin += w_[k] * d[k];
        nll += std::log1p(std::exp(-margin));
        const double g = 1.0 / (1.0 + std::exp(margin));  // d(-nll)/d(margin)
        for (std::size_t k = 0; k < d.size(); ++k) grad[k] += g * d[k];
      }
      const auto n = static_cast<double>(diff.size());
      for (std::size_t k = 0; k < w_.size(); ++k) w_[k] += lr * (grad[k] / n - l2 * w_[k]);
      nll /= n;
    }
    return nll;
  }

  // Fraction of pairs the model orders as labelled.
  [[nodiscard]] double accuracy(const std::vector<preference_pair>& pairs) const {
    std::size_t right = 0;
    for (const auto& p : pairs) right += score(p.topic, p.chosen) > score(p.topic, p.rejected);
    return pairs.empty() ? 0.0 : static_cast<double>(right) / static_cast<double>(pairs.size());
  }

  // Fraction of pairs of distinct gold utility the model orders as the gold does.
  [[nodiscard]] double gold_agreement(const std::vector<preference_pair>& pairs) const {
    std::size_t right = 0, counted = 0;
    for (const auto& p : pairs) {
      const double ga = gold_chat_utility(p.topic, p.chosen), gb = gold_chat_utility(p.topic, p.rejected);
      if (ga == gb) continue;
      ++counted;
      right += (score(p.topic, p.chosen) > score(p.topic, p.rejected)) == (ga > gb);
    }
    return counted == 0 ? 0.0 : static_cast<double>(right) / static_cast<double>(counted);
  }

  [[nodiscard]] const std::array<double, chat_feature_count>& weights() const { return w_; }

 private:
  std::array<double, chat_feature_count> w_{};
};

}  // namespace demo
