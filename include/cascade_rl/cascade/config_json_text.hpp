#pragma once
// JSON text of a config file to a nlohmann::json value, strictly:
//   - comments (// and /* */) are allowed: a schedule wants its "placeholder" notes;
//   - a key repeated in one object is refused: nlohmann would keep the last silently, so
//     an edited copy of a field would be ignored without a word;
//   - every failure is a cascade_rl::error: malformed text names its line and column
//     ("line 3, column 5: invalid JSON: ..."), a repeated key or an overflowing number
//     names its path ("stages[2].lr.peak").

#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/core/error.hpp"

namespace cascade_rl::detail {

// Follows the parser's events to know the path of the value being read. Only the
// innermost key or index is kept per level, so deep nesting costs no quadratic memory.
class json_path_tracker {
 public:
  // `array_root`: the name a root array stands for ("stages"); an object root is "".
  explicit json_path_tracker(std::string array_root) : array_root_(std::move(array_root)) {}

  bool on_event(nlohmann::json::parse_event_t event, const nlohmann::json& parsed) {
    using ev = nlohmann::json::parse_event_t;
    switch (event) {
      case ev::object_start: levels_.push_back({.array = false}); break;
      case ev::array_start: levels_.push_back({.array = true}); break;
      case ev::key: {
        level& top = levels_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second)
          fail(path(), "appears twice in one object (JSON would keep the last silently)");
        break;
      }
      case ev::object_end:
      case ev::array_end:
        levels_.pop_back();
        completed();
        break;
      case ev::value: completed(); break;
    }
    return true;
  }

  // The path of the value being read now: the last key or index at every level.
  [[nodiscard]] std::string path() const {
    std::string out = !levels_.empty() && levels_.front().array ? array_root_ : std::string();
    for (const level& l : levels_) {
      if (l.array) {
        out.append("[").append(std::to_string(l.index)).append("]");
      } else {
        if (!out.empty()) out += ".";
        out += l.key;
      }
    }
    return out.empty() ? "(root)" : out;
  }

 private:
  struct level {
    bool array = false;
    std::size_t index = 0;       // arrays: elements completed so far
    std::string key{};           // objects: the key being read
    std::set<std::string> keys{};
  };

  void completed() {
    if (!levels_.empty() && levels_.back().array) ++levels_.back().index;
  }

  std::string array_root_;
  std::vector<level> levels_;
};

// nlohmann's what() without its "[json.exception.parse_error.101] " tag.
[[nodiscard]] inline std::string json_error_text(const nlohmann::json::exception& e) {
  const std::string_view what(e.what());
  const std::size_t end = what.find("] ");
  return std::string(what.starts_with("[json.exception.") && end != std::string_view::npos
                         ? what.substr(end + 2)
                         : what);
}

// "at line 3, column 5: syntax error ..." of nlohmann's parse_error, split into its
// location ("line 3, column 5") and its problem.
[[noreturn]] inline void fail_parse_error(const nlohmann::json::parse_error& e) {
  const std::string text = json_error_text(e);  // "parse error at line 3, column 5: ..."
  constexpr std::string_view at = "parse error at ";
  const std::size_t colon = text.find(": ");
  if (text.starts_with(at) && colon != std::string::npos)
    fail(text.substr(at.size(), colon - at.size()), "invalid JSON: " + text.substr(colon + 2));
  fail("JSON text", "invalid JSON: " + text);
}

// Parses `text`; `array_root` as in json_path_tracker.
[[nodiscard]] inline nlohmann::json parse_config_json(std::string_view text, const std::string& array_root) {
  json_path_tracker tracker(array_root);
  try {
    return nlohmann::json::parse(
        text.begin(), text.end(),
        [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          return tracker.on_event(event, parsed);
        },
        /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::parse_error& e) {
    fail_parse_error(e);
  } catch (const nlohmann::json::exception& e) {  // a number too large for a double
    fail(tracker.path(), json_error_text(e));
  }
}

}  // namespace cascade_rl::detail
