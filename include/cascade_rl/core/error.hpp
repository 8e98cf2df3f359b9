#pragma once
// The one exception type of the library, and the helpers that build its messages.
// Every message names the argument at fault and, where there is one, the first
// offending index, so that a caller can find the bad element without a debugger.

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cascade_rl {

// Thrown for every refused input. Derives from std::invalid_argument so that callers
// who catch standard exceptions see it too. Its parts are kept apart as well as written
// into what():
//   what()     "cascade_rl: <argument>: <problem>"
//           or "cascade_rl: <argument>[<index>]: <problem>"
//   argument() where the fault is, as given: "rewards", "options.clip_low",
//              "stage 'if_rl'.filters.overlong.max_length"
//   index()    the first offending element of argument, where there is one
//   problem()  what is wrong: "is infinite"
// so that code which re-points an error at another location (relocated, with_context)
// never parses the text. argument() and problem() view what(): they live as long as
// this error (or a copy of it).
class error : public std::invalid_argument {
 public:
  error(std::string_view argument, std::string_view problem)
      : error(argument, std::nullopt, problem) {}
  error(std::string_view argument, std::size_t index, std::string_view problem)
      : error(argument, std::optional<std::size_t>(index), problem) {}

  [[nodiscard]] std::string_view argument() const noexcept {
    return std::string_view(what()).substr(tag.size(), argument_size_);
  }
  [[nodiscard]] std::optional<std::size_t> index() const noexcept { return index_; }
  [[nodiscard]] std::string_view problem() const noexcept {
    return std::string_view(what()).substr(problem_offset_);
  }

  // The same problem (and index) at `field`: what an algorithm's check says about its
  // own argument ("options.clip_low"), said about the config field it came from
  // ("stage 's'.update.ppo" + "clip_low"). `own_prefix` is taken off the front of
  // argument() when it is there; the rest follows `field` after a '.' (nothing follows
  // when nothing is left).
  [[nodiscard]] error relocated(std::string_view field, std::string_view own_prefix = {}) const {
    std::string_view rest = argument();
    if (rest.starts_with(own_prefix)) rest.remove_prefix(own_prefix.size());
    std::string moved(field);
    if (!rest.empty()) moved.append(".").append(rest);
    return error(moved, index_, problem());
  }

  // The same error inside `context`, which argument() now starts with:
  // "schedule file 'a.json'" + ": " + "stages[1].steps".
  [[nodiscard]] error with_context(std::string_view context) const {
    std::string inside(context);
    inside.append(": ").append(argument());
    return error(inside, index_, problem());
  }

 private:
  static constexpr std::string_view tag = "cascade_rl: ";

  error(std::string_view argument, std::optional<std::size_t> index, std::string_view problem)
      : std::invalid_argument(compose(argument, index, problem)),
        argument_size_(argument.size()),
        problem_offset_(std::string_view(what()).size() - problem.size()),
        index_(index) {}

  static std::string compose(std::string_view argument, std::optional<std::size_t> index,
                             std::string_view problem) {
    std::string message(tag);
    message.append(argument);
    if (index) message.append("[").append(std::to_string(*index)).append("]");
    message.append(": ").append(problem);
    return message;
  }

  std::size_t argument_size_;
  std::size_t problem_offset_;
  std::optional<std::size_t> index_;
};

namespace detail {

// "cascade_rl: <argument>: <problem>"
[[noreturn]] inline void fail(std::string_view argument, std::string_view problem) {
  throw error(argument, problem);
}

// "cascade_rl: <argument>[<index>]: <problem>"
[[noreturn]] inline void fail_at(std::string_view argument, std::size_t index,
                                 std::string_view problem) {
  throw error(argument, index, problem);
}

inline void require(bool condition, std::string_view argument, std::string_view problem) {
  if (!condition) fail(argument, problem);
}

}  // namespace detail
}  // namespace cascade_rl
