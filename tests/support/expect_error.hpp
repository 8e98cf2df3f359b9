#pragma once
// expect_error_naming: the check behind principle 6 (bad input is refused with a
// message naming the argument and the first offending index).

#include <gtest/gtest.h>

#include <string>

#include "cascade_rl/core/error.hpp"

namespace cascade_rl::testing {

// The message of the cascade_rl::error that `make` throws, or "" when it throws none.
template <class Make>
std::string error_message(Make make) {
  try {
    make();
  } catch (const cascade_rl::error& e) {
    return e.what();
  }
  return "";
}

// Runs `make` and checks that it throws cascade_rl::error whose message holds every
// needle (e.g. "rewards[3]", or "groups[1]" and "RLOO").
template <class Make, class... Needles>
void expect_error_naming(Make make, const std::string& needle, const Needles&... more) {
  try {
    make();
    ADD_FAILURE() << "expected cascade_rl::error naming " << needle;
  } catch (const cascade_rl::error& e) {
    const std::string message = e.what();
    for (const std::string& n : {needle, std::string(more)...})
      EXPECT_NE(message.find(n), std::string::npos) << "missing '" << n << "' in: " << message;
  }
}

}  // namespace cascade_rl::testing
