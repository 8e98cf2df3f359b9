#pragma once
// A short text option stored in place: a character array and its length, trivially
// copyable. The update rules are alternatives of one std::variant; an alternative holding
// std::string makes the variant non-trivial, and GCC 12 (-O2 and up) then reports the
// variant's index as "maybe uninitialized" wherever a stage_config is built with designated
// initialisers (a false positive that broke -Werror builds of the examples). The texts it
// holds are veRL's short specs ("token_k1,seq_mean_k3", "0.5_5.0"); one that does not fit
// is refused, not cut.

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

template <std::size_t Capacity>
class config_text {
 public:
  static constexpr std::size_t capacity = Capacity;

  constexpr config_text() = default;
  // Implicit, so that a rule reads `.rollout_rs = "token_k2"`.
  config_text(std::string_view text) {  // NOLINT(google-explicit-constructor)
    if (text.size() > Capacity)
      detail::fail("text", "has " + std::to_string(text.size()) + " characters, at most " +
                               std::to_string(Capacity) + " fit: \"" + std::string(text) + "\"");
    std::copy(text.begin(), text.end(), chars_.begin());
    size_ = text.size();
  }
  config_text(const char* text) : config_text(std::string_view(text)) {}         // NOLINT
  config_text(const std::string& text) : config_text(std::string_view(text)) {}  // NOLINT

  [[nodiscard]] std::string_view view() const { return {chars_.data(), size_}; }
  [[nodiscard]] std::string str() const { return std::string(view()); }

  friend bool operator==(const config_text& a, const config_text& b) {
    return a.view() == b.view();
  }
  friend bool operator==(const config_text& a, std::string_view b) { return a.view() == b; }
  friend bool operator==(const config_text& a, const char* b) {
    return a.view() == std::string_view(b);
  }
  friend bool operator==(const config_text& a, const std::string& b) { return a.view() == b; }

 private:
  std::array<char, Capacity> chars_{};
  std::size_t size_ = 0;
};

}  // namespace cascade_rl
