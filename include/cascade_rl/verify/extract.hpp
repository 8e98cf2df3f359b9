#pragma once
// Finding the program or the patch in a model's response: the last fenced block
// (```lang ... ```) whose info string is one of `languages` (any block when the list
// is empty), else the whole text.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cascade_rl::verify {

[[nodiscard]] inline std::optional<std::string> last_fenced_block(std::string_view text,
                                                                  const std::vector<std::string>& languages) {
  std::optional<std::string> found;
  std::size_t pos = 0;
  while ((pos = text.find("```", pos)) != std::string_view::npos) {
    if (pos != 0 && text[pos - 1] != '\n') {
      pos += 3;
      continue;
    }
    const std::size_t info_end = text.find('\n', pos);
    if (info_end == std::string_view::npos) break;
    std::string_view info = text.substr(pos + 3, info_end - pos - 3);
    while (!info.empty() && (info.back() == ' ' || info.back() == '\r')) info.remove_suffix(1);
    std::size_t close = text.find("\n```", info_end);
    if (close == std::string_view::npos) close = text.size();  // unterminated: to the end
    bool wanted = languages.empty();
    for (const std::string& l : languages) wanted = wanted || info == l;
    if (wanted) found = std::string(text.substr(info_end + 1, close - info_end));
    pos = close == text.size() ? close : close + 4;
  }
  return found;
}

// The program in a response written for `languages` (e.g. {"python", "py"}).
[[nodiscard]] inline std::string extract_code(std::string_view text, const std::vector<std::string>& languages) {
  if (auto block = last_fenced_block(text, languages)) return *block;
  if (auto block = last_fenced_block(text, {})) return *block;
  return std::string(text);
}

// The patch in a response: a ```diff / ```patch block, else the text from the first
// "diff --git" or "--- " line on.
[[nodiscard]] inline std::string extract_patch(std::string_view text) {
  if (auto block = last_fenced_block(text, {"diff", "patch"})) return *block;
  for (std::string_view start : {"diff --git", "--- "}) {
    if (text.starts_with(start)) return std::string(text);
    std::string needle(1, '\n');
    needle.append(start);
    const std::size_t at = text.find(needle);
    if (at != std::string_view::npos) return std::string(text.substr(at + 1));
  }
  return std::string(text);
}

}  // namespace cascade_rl::verify
