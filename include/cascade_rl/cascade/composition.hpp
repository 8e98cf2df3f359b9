#pragma once
// A cascade: heterogeneous stages fixed at compile time, run in order on one policy.
//   auto cascade = make_cascade(if_rl, multi_domain, mopd, rlhf);
// The stages are held by value (moved or copied in); a stage's prompt source advances
// as the cascade runs.

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cascade_rl/cascade/schedules.hpp"
#include "cascade_rl/cascade/stage.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

template <stage_shape... S>
class cascade {
 public:
  static_assert(sizeof...(S) > 0, "a cascade needs at least one stage");

  explicit cascade(S... stages) : stages_(std::move(stages)...) {}

  [[nodiscard]] static constexpr std::size_t size() { return sizeof...(S); }

  // f(stage) for stage i (a run-time index over the compile-time list).
  template <class F>
  decltype(auto) visit(std::size_t i, F&& f) {
    return visit_impl(*this, i, std::forward<F>(f), std::index_sequence_for<S...>{});
  }
  template <class F>
  decltype(auto) visit(std::size_t i, F&& f) const {
    return visit_impl(*this, i, std::forward<F>(f), std::index_sequence_for<S...>{});
  }
  template <class F>
  void for_each(F&& f) {
    std::apply([&](auto&... s) { (f(s), ...); }, stages_);
  }
  template <class F>
  void for_each(F&& f) const {
    std::apply([&](const auto&... s) { (f(s), ...); }, stages_);
  }

  template <std::size_t I>
  [[nodiscard]] auto& get() { return std::get<I>(stages_); }

  [[nodiscard]] std::vector<stage_config> configs() const {
    std::vector<stage_config> out;
    for_each([&](const auto& s) { out.push_back(s.config()); });
    return out;
  }

  // The evaluated domains, in stage order: the forgetting matrix's columns.
  [[nodiscard]] std::vector<std::string> eval_domains() const {
    std::vector<std::string> out;
    for (const stage_config& c : configs())
      for (const eval_set& e : c.evals) out.push_back(e.domain);
    return out;
  }

  [[nodiscard]] std::vector<std::string> warnings() const { return check_ordering(configs()); }

  // Every stage's own checks, unique stage names, and one evaluation set per domain
  // (a domain's column must mean one thing).
  void validate() const {
    for_each([](const auto& s) { s.validate(); });
    detail::validate_stage_set(configs());
  }

 private:
  template <class Self, class F, std::size_t... I>
  static decltype(auto) visit_impl(Self& self, std::size_t i, F&& f, std::index_sequence<I...>) {
    using result = decltype(f(std::get<0>(self.stages_)));
    if (i >= sizeof...(S)) detail::fail("stage index", std::to_string(i) + " is out of range");
    if constexpr (std::is_void_v<result>) {
      ((i == I ? (f(std::get<I>(self.stages_)), 0) : 0), ...);
    } else {
      result r{};
      ((i == I ? (r = f(std::get<I>(self.stages_)), 0) : 0), ...);
      return r;
    }
  }

  std::tuple<S...> stages_;
};

template <class... S>
[[nodiscard]] cascade<std::decay_t<S>...> make_cascade(S&&... stages) {
  return cascade<std::decay_t<S>...>(std::forward<S>(stages)...);
}

}  // namespace cascade_rl
