#pragma once
// A small unified-diff reader and applier, for patch-and-test rewards. It reads what
// `diff -u` and `git diff` write: optional headers (diff --git, index, mode lines) that
// are skipped, then for each file "--- old" and "+++ new" (a/ and b/ prefixes
// stripped, /dev/null for created and deleted files) and hunks
// "@@ -start[,count] +start[,count] @@" whose lines start with ' ', '-', '+' or '\'
// ("\ No newline at end of file"). Counts must match the hunk body.
//
// Applying is exact (no fuzz): each hunk's old lines must appear in the file, searched
// from the stated line outwards (like patch's offsets). A patch applies whole or not at
// all. Paths must be relative and stay inside the target directory.

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cascade_rl/verify/scratch_directory.hpp"

namespace cascade_rl::verify {

struct diff_hunk {
  std::size_t old_start = 0, old_count = 0, new_start = 0, new_count = 0;
  std::vector<std::string> lines;  // each with its prefix: ' ', '-' or '+'
  bool old_ends_without_newline = false;
  bool new_ends_without_newline = false;
};

struct file_diff {
  std::string old_path, new_path;  // prefixes stripped; empty for /dev/null
  std::vector<diff_hunk> hunks;
  [[nodiscard]] bool creates() const { return old_path.empty(); }
  [[nodiscard]] bool deletes() const { return new_path.empty(); }
};

struct parsed_diff {
  std::vector<file_diff> files;
  std::string error;  // empty when the text parsed; else why not, with the line number
  [[nodiscard]] bool ok() const { return error.empty(); }
};

namespace detail {

inline std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

// "a/src/x.py\t2024-01-01 ..." -> "src/x.py"; "/dev/null" -> "".
inline std::string diff_path(std::string_view field) {
  const std::size_t tab = field.find('\t');
  if (tab != std::string_view::npos) field = field.substr(0, tab);
  while (!field.empty() && field.back() == ' ') field.remove_suffix(1);
  if (field.size() >= 2 && field.front() == '"' && field.back() == '"') field = field.substr(1, field.size() - 2);
  if (field == "/dev/null") return {};
  if (field.starts_with("a/") || field.starts_with("b/")) field.remove_prefix(2);
  return std::string(field);
}

inline bool parse_number(std::string_view& s, std::size_t& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || end == s.data()) return false;
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  return true;
}

// "-12,3" or "-12" (count 1)
inline bool parse_range(std::string_view& s, char sign, std::size_t& start, std::size_t& count) {
  if (s.empty() || s.front() != sign) return false;
  s.remove_prefix(1);
  if (!parse_number(s, start)) return false;
  count = 1;
  if (!s.empty() && s.front() == ',') {
    s.remove_prefix(1);
    if (!parse_number(s, count)) return false;
  }
  return true;
}

inline bool parse_hunk_header(std::string_view line, diff_hunk& h) {
  if (!line.starts_with("@@ ")) return false;
  line.remove_prefix(3);
  if (!parse_range(line, '-', h.old_start, h.old_count)) return false;
  if (!line.starts_with(" ")) return false;
  line.remove_prefix(1);
  if (!parse_range(line, '+', h.new_start, h.new_count)) return false;
  return line.starts_with(" @@");
}

}  // namespace detail

[[nodiscard]] inline parsed_diff parse_unified_diff(std::string_view text) {
  parsed_diff out;
  const auto lines = detail::split_lines(text);
  const auto fail = [&](std::size_t line, const std::string& why) {
    out.files.clear();
    out.error = "line " + std::to_string(line + 1) + ": " + why;
    return out;
  };
  // "\ No newline at end of file" refers to the line before it.
  const auto mark_no_newline = [](diff_hunk& h) {
    const char last = h.lines.empty() ? ' ' : h.lines.back().front();
    if (last != '+') h.old_ends_without_newline = true;
    if (last != '-') h.new_ends_without_newline = true;
  };
  std::size_t i = 0;
  while (i < lines.size()) {
    if (!lines[i].starts_with("--- ")) {
      if (lines[i].starts_with("@@ ")) return fail(i, "hunk before any '--- ' / '+++ ' file header");
      ++i;  // diff --git, index, mode lines, prose around the patch
      continue;
    }
    if (i + 1 >= lines.size() || !lines[i + 1].starts_with("+++ "))
      return fail(i, "'--- ' is not followed by '+++ '");
    file_diff f;
    f.old_path = detail::diff_path(lines[i].substr(4));
    f.new_path = detail::diff_path(lines[i + 1].substr(4));
    if (f.old_path.empty() && f.new_path.empty()) return fail(i, "both sides are /dev/null");
    i += 2;
    while (i < lines.size() && lines[i].starts_with("@@")) {
      diff_hunk h;
      if (!detail::parse_hunk_header(lines[i], h)) return fail(i, "malformed hunk header '" + std::string(lines[i]) + "'");
      const std::size_t header = i++;
      std::size_t old_seen = 0, new_seen = 0;
      while (old_seen < h.old_count || new_seen < h.new_count) {
        if (i >= lines.size())
          return fail(header, "hunk ends early (" + std::to_string(old_seen) + " of " + std::to_string(h.old_count) +
                                  " old lines, " + std::to_string(new_seen) + " of " + std::to_string(h.new_count) +
                                  " new lines)");
        std::string_view l = lines[i];
        const char kind = l.empty() ? ' ' : l.front();  // an empty line: empty context
        if (kind == '\\') {
          mark_no_newline(h);
          ++i;
          continue;
        }
        if (kind != ' ' && kind != '-' && kind != '+')
          return fail(i, "unexpected line in hunk (counts say " + std::to_string(h.old_count - old_seen) +
                             " old and " + std::to_string(h.new_count - new_seen) + " new lines remain)");
        if (kind != '+') ++old_seen;
        if (kind != '-') ++new_seen;
        if (old_seen > h.old_count || new_seen > h.new_count) return fail(i, "hunk longer than its header says");
        h.lines.push_back(std::string(1, kind) + std::string(l.empty() ? l : l.substr(1)));
        ++i;
      }
      // "\ No newline at end of file" after the last old / new line
      while (i < lines.size() && lines[i].starts_with("\\")) {
        mark_no_newline(h);
        ++i;
      }
      f.hunks.push_back(std::move(h));
    }
    if (f.hunks.empty()) return fail(i > 0 ? i - 1 : 0, "file '" + (f.new_path.empty() ? f.old_path : f.new_path) + "' has no hunks");
    out.files.push_back(std::move(f));
  }
  if (out.files.empty()) return fail(0, "no '--- ' / '+++ ' file header: not a unified diff");
  return out;
}

struct apply_result {
  bool ok = false;
  std::string error;  // which file and hunk did not apply
};

namespace detail {

struct text_file {
  std::vector<std::string> lines;
  bool ends_with_newline = true;
};

inline text_file split_file(const std::string& contents) {
  text_file t;
  std::size_t start = 0;
  while (start < contents.size()) {
    std::size_t end = contents.find('\n', start);
    if (end == std::string::npos) {
      t.lines.push_back(contents.substr(start));
      t.ends_with_newline = false;
      break;
    }
    t.lines.push_back(contents.substr(start, end - start));
    start = end + 1;
  }
  return t;
}

inline std::string join_file(const text_file& t) {
  std::string out;
  for (std::size_t i = 0; i < t.lines.size(); ++i) {
    out += t.lines[i];
    if (i + 1 < t.lines.size() || t.ends_with_newline) out += '\n';
  }
  return out;
}

// Applies the hunks of f to t; returns an error message or nothing.
inline std::optional<std::string> apply_hunks(text_file& t, const file_diff& f) {
  long shift = 0;  // lines added minus removed by earlier hunks
  std::size_t floor = 0;  // hunks apply in order, after the previous one
  for (std::size_t k = 0; k < f.hunks.size(); ++k) {
    const diff_hunk& h = f.hunks[k];
    std::vector<std::string> old_lines, new_lines;
    for (const auto& l : h.lines) {
      if (l.front() != '+') old_lines.push_back(l.substr(1));
      if (l.front() != '-') new_lines.push_back(l.substr(1));
    }
    const auto matches = [&](std::size_t at) {
      if (at + old_lines.size() > t.lines.size()) return false;
      return std::equal(old_lines.begin(), old_lines.end(), t.lines.begin() + static_cast<long>(at));
    };
    // Where the header says (old_start is 1-based; 0 for an empty old side), then
    // further and further away.
    const long stated = static_cast<long>(h.old_count == 0 ? h.old_start : h.old_start - 1) + shift;
    std::optional<std::size_t> found;
    const long size = static_cast<long>(t.lines.size());
    for (long d = 0; !found && d <= size + 1; ++d)
      for (const long at : {stated - d, stated + d})
        if (at >= static_cast<long>(floor) && at <= size && matches(static_cast<std::size_t>(at))) {
          found = static_cast<std::size_t>(at);
          break;
        }
    if (!found)
      return "hunk " + std::to_string(k + 1) + " (@@ -" + std::to_string(h.old_start) + "," +
             std::to_string(h.old_count) + " @@) does not match the file";
    const auto at = static_cast<long>(*found);
    t.lines.erase(t.lines.begin() + at, t.lines.begin() + at + static_cast<long>(old_lines.size()));
    t.lines.insert(t.lines.begin() + at, new_lines.begin(), new_lines.end());
    floor = *found + new_lines.size();
    shift += static_cast<long>(new_lines.size()) - static_cast<long>(old_lines.size());
    if (at + static_cast<long>(new_lines.size()) == static_cast<long>(t.lines.size())) {
      if (h.new_ends_without_newline) t.ends_with_newline = false;
      else if (h.old_ends_without_newline) t.ends_with_newline = true;
    }
  }
  return std::nullopt;
}

// Whether `target` (a path under `root`) reaches its file without going through a
// symbolic link. Component by component with lstat, so that it also holds for a root
// such as /proc/self/fd/N (a tmpfs scratch directory), whose canonical form is no path
// of this process's file system.
inline bool stays_inside(const std::filesystem::path& root, const std::filesystem::path& target) {
  const auto rel = target.lexically_relative(root);
  if (rel.empty() || *rel.begin() == "..") return false;
  std::filesystem::path at = root;
  for (const auto& part : rel) {
    at /= part;
    std::error_code ec;
    const auto status = std::filesystem::symlink_status(at, ec);
    if (ec || !std::filesystem::exists(status)) return true;  // the rest is to be created
    if (std::filesystem::is_symlink(status)) return false;
  }
  return true;
}

}  // namespace detail

// The new contents of each file `diff` touches (nullopt: deleted), keyed by its path
// relative to the tree, computed from the current ones that `read(relative path)` gives
// (nullopt: no such regular file); or why the patch does not apply. Nothing is written.
using diff_writes = std::map<std::string, std::optional<std::string>>;
template <class Read>
[[nodiscard]] std::optional<std::string> plan_unified_diff(const parsed_diff& diff, Read&& read, diff_writes& writes) {
  if (!diff.ok()) return "the patch did not parse: " + diff.error;
  writes.clear();
  const auto normal = [](const std::string& path) { return std::filesystem::path(path).lexically_normal().string(); };
  for (const file_diff& f : diff.files) {
    const std::string name = normal(f.deletes() ? f.old_path : f.new_path);
    const std::string source = f.creates() ? name : normal(f.old_path);
    detail::text_file t;
    if (const auto pending = writes.find(source); pending != writes.end()) {
      if (!pending->second) return "'" + f.old_path + "' was deleted earlier in the patch";
      t = detail::split_file(*pending->second);
    } else if (!f.creates()) {
      const std::optional<std::string> current = read(source);
      if (!current) return "'" + f.old_path + "' does not exist";
      t = detail::split_file(*current);
    } else if (read(name)) {
      return "'" + f.new_path + "' is created by the patch but already exists";
    }
    if (auto error = detail::apply_hunks(t, f)) return "'" + name + "': " + *error;
    if (f.deletes()) {
      if (!t.lines.empty()) return "'" + f.old_path + "': deleting patch leaves lines behind";
      writes[source] = std::nullopt;
    } else {
      if (source != name) writes[source] = std::nullopt;  // a rename
      writes[name] = detail::join_file(t);
    }
  }
  return std::nullopt;
}

// Applies `diff` to the files under `root`, all or nothing.
[[nodiscard]] inline apply_result apply_unified_diff(const parsed_diff& diff, const std::filesystem::path& root) {
  for (const file_diff& f : diff.files) {
    for (const std::string& name : {f.old_path, f.new_path}) {
      if (name.empty()) continue;
      std::filesystem::path target;
      try {
        target = detail::inside(root, name, "patch path");
      } catch (const cascade_rl::error&) {
        return {false, "'" + name + "' is not a relative path inside the repository"};
      }
      if (!detail::stays_inside(root, target))
        return {false, "'" + name + "' resolves outside the repository (through a symbolic link)"};
      if (f.creates() && std::filesystem::exists(std::filesystem::symlink_status(target)))
        return {false, "'" + name + "' is created by the patch but already exists"};
    }
  }
  const auto read = [&](const std::string& name) -> std::optional<std::string> {
    const std::filesystem::path path = root / name;
    if (!std::filesystem::is_regular_file(path)) return std::nullopt;
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  diff_writes writes;
  if (const std::optional<std::string> error = plan_unified_diff(diff, read, writes)) return {false, *error};
  for (const auto& [name, contents] : writes) {
    const std::filesystem::path path = root / name;
    if (!contents) {
      std::filesystem::remove(path);
      continue;
    }
    std::filesystem::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(contents->data(), static_cast<std::streamsize>(contents->size()));
    if (!out) return {false, "cannot write '" + path.string() + "'"};
  }
  return {true, {}};
}

}  // namespace cascade_rl::verify
