// The shape every loss case of trl_nemo_rl.json is checked in (tests/reference/
// README_trl_nemo_rl.md): each case against its named batch, in double and in float; the
// loss and dL/dlogp summed over the terms that make the peer's loss (policy term, KL,
// bonuses), then compared with the peer's within the README's tolerance.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/reference.hpp"

namespace cascade_rl::testing {

// How many cases a test reproduced and how many the preset refused by name (float and
// double each count).
struct case_totals {
  int reproduced = 0;
  int refused = 0;
};

// Calls check(case, batch, context, T{}) with T = double, then float, for every case of
// `cases`, whose "batch" names its batch in `batches`; the context names the case by
// `name`[index] and its batch.
template <class Check>
void check_every_case(const nlohmann::json& cases, const nlohmann::json& batches,
                      const std::string& name, Check check) {
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    const std::string batch = c["batch"].get<std::string>();
    const std::string context = name + "[" + std::to_string(k) + "] " + batch;
    check(c, batches[batch], context, double{});
    check(c, batches[batch], context + " (float)", float{});
  }
}

// A per-row value ([N]) on every token of its row ([N][width], row-major).
template <class T>
std::vector<T> per_token_of_rows(const nlohmann::json& rows, std::size_t width) {
  std::vector<T> out;
  for (const auto& value : rows)
    for (std::size_t t = 0; t < width; ++t) out.push_back(value.get<T>());
  return out;
}

// The peer's loss as the sum of our terms: each term's value and its grad_out.
struct summed_loss {
  double loss = 0;
  std::vector<double> grad;

  explicit summed_loss(std::size_t tokens) : grad(tokens, 0.0) {}

  template <class T>
  void add(double value, std::span<const T> term_grad) {
    ASSERT_EQ(term_grad.size(), grad.size());
    loss += value;
    for (std::size_t t = 0; t < grad.size(); ++t) grad[t] += static_cast<double>(term_grad[t]);
  }
  template <class T>
  void add(double value, const std::vector<T>& term_grad) {
    add(value, std::span<const T>(term_grad));
  }

  // The loss against c[loss_key] and the gradient against c[grad_key] ([N][T]).
  void expect_matches(const nlohmann::json& c, const char* loss_key, const char* grad_key,
                      const std::string& context) const {
    expect_close(loss, c[loss_key].get<double>(), context + " " + loss_key);
    expect_all_close(std::span<const double>(grad), flatten<double>(c[grad_key]),
                     context + " " + grad_key);
  }
};

}  // namespace cascade_rl::testing
