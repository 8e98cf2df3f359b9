#pragma once
// The one exception type of the library, and the helpers that build its messages.
// Every message names the argument at fault and, where there is one, the first
// offending index, so that a caller can find the bad element without a debugger.

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cascade_rl {

// Thrown for every refused input. Derives from std::invalid_argument so that callers
// who catch standard exceptions see it too.
class error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {

// "cascade_rl: <argument>: <problem>"
[[noreturn]] inline void fail(std::string_view argument, std::string_view problem) {
  std::string message = "cascade_rl: ";
  message.append(argument).append(": ").append(problem);
  throw error(message);
}

// "cascade_rl: <argument>[<index>]: <problem>"
[[noreturn]] inline void fail_at(std::string_view argument, std::size_t index,
                                 std::string_view problem) {
  std::string message = "cascade_rl: ";
  message.append(argument)
      .append("[")
      .append(std::to_string(index))
      .append("]: ")
      .append(problem);
  throw error(message);
}

inline void require(bool condition, std::string_view argument, std::string_view problem) {
  if (!condition) fail(argument, problem);
}

}  // namespace detail
}  // namespace cascade_rl
