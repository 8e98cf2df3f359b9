#pragma once
// Stage configs and whole schedules as JSON, so that a schedule can live in a file next
// to the run instead of in C++:
//
//   {"stages": [
//     {"name": "if_rl", "kind": "IF-RL", "domains": ["instruction_following"],
//      "group_size": 16, "prompts_per_step": 128, "steps": 180,
//      "lr": {"shape": "constant", "peak": 3e-06}},
//     {"name": "mopd", "kind": "MOPD", ...}]}
//
// Keys are the C++ member names (stage_config_fields.hpp lists them); enums are spelt
// as enum_names.hpp says ("IF-RL", "token-mean"); optionals are null when unset; a
// variant is an object with one key naming the alternative it holds
// ("rule": {"ppo_clip": {"epochs": 2}} or {"on_policy": {}}). Reading is strict, because
// a config that is half understood trains the wrong thing for days:
//   - a missing field keeps its C++ default (in a nested object, the default of the
//     enclosing struct: eval_sampling's temperature stays 0);
//   - an unknown key, a wrong type, a bad enum name, a number out of the field's range
//     or not finite is a cascade_rl::error naming the JSON path of the value
//     ("stages[2].update.rule.ppo_clip.clip_lo: unknown key (did you mean clip_low?)");
//     a key an earlier version wrote and that no longer means anything is refused with
//     what to set instead ("stages[2].update.epochs: removed key: set
//     update.rule.ppo_clip.epochs ..."); a variant with no key or two keys, or an unknown
//     alternative, is refused with the alternatives it has;
//   - a parsed stage then passes the checks its stage will make (MOPD's for kind "MOPD",
//     GRPO's otherwise; stage_config.hpp), and a schedule those across stages, so a
//     config that parses is one the engine accepts, errors still naming JSON paths.
// Writing gives every field, in declaration order, doubles in the shortest form that
// reads back to the same bits: write then read gives an equal config
// (stage_config_difference is empty). The writer does not validate; it refuses only
// what JSON cannot hold (a non-finite double, invalid UTF-8, an unnamed enum value).

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/atomic_file.hpp"
#include "cascade_rl/cascade/config_json_text.hpp"
#include "cascade_rl/cascade/did_you_mean.hpp"
#include "cascade_rl/cascade/enum_names.hpp"
#include "cascade_rl/cascade/stage_config.hpp"
#include "cascade_rl/cascade/stage_config_difference.hpp"
#include "cascade_rl/cascade/stage_config_fields.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {
namespace detail::config_json {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// "string \"abc\"", "number 3.5", "object", "null": what was found instead, shortened.
inline std::string found(const json& j) {
  if (j.is_object() || j.is_array() || j.is_null()) return j.type_name();
  std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(j.type_name()) + " " + text;
}

[[noreturn]] inline void wrong_type(const json& j, const std::string& path, std::string_view expected) {
  fail(path, "expected " + std::string(expected) + ", got " + found(j));
}

// ---- reading ---------------------------------------------------------------------------
// Declared first: the readers of containers and structs call each other.

inline void read(const json& j, bool& out, const std::string& path);
inline void read(const json& j, double& out, const std::string& path);
inline void read(const json& j, std::size_t& out, const std::string& path);
inline void read(const json& j, std::int64_t& out, const std::string& path);
inline void read(const json& j, std::string& out, const std::string& path);
template <named_enum E>
void read(const json& j, E& out, const std::string& path);
template <class T>
void read(const json& j, std::optional<T>& out, const std::string& path);
template <class T>
void read(const json& j, std::vector<T>& out, const std::string& path);
template <described_config T>
void read(const json& j, T& out, const std::string& path);
template <described_variant V>
void read(const json& j, V& out, const std::string& path);

// A type that keeps its own JSON form (a generator state, the forgetting matrix, a
// stage's opaque state) joins the walk through json_codec<T>, specialised next to it:
//   static void read(const json&, T&, const std::string& path);  // errors name path
//   static ordered_json write(const T&, const std::string& path);
template <class T>
struct json_codec;

template <class T>
concept coded_json = requires(const json& j, T& out, const std::string& path) {
  json_codec<T>::read(j, out, path);
  { json_codec<T>::write(std::as_const(out), path) } -> std::same_as<ordered_json>;
};

template <coded_json T>
void read(const json& j, T& out, const std::string& path) {
  json_codec<T>::read(j, out, path);
}

// A config_text: a JSON string that fits its capacity (refused by path otherwise).
template <std::size_t N>
struct json_codec<config_text<N>> {
  static void read(const json& j, config_text<N>& out, const std::string& path) {
    if (!j.is_string()) wrong_type(j, path, "a string");
    const std::string& text = j.get_ref<const std::string&>();
    if (text.size() > N)
      fail(path, "has " + std::to_string(text.size()) + " characters, at most " +
                     std::to_string(N) + " fit");
    out = config_text<N>(text);
  }
  static ordered_json write(const config_text<N>& v, const std::string&) {
    return ordered_json(v.str());
  }
};

inline void read(const json& j, bool& out, const std::string& path) {
  if (!j.is_boolean()) wrong_type(j, path, "true or false");
  out = j.get<bool>();
}

inline void read(const json& j, double& out, const std::string& path) {
  if (!j.is_number()) wrong_type(j, path, "a number");
  out = j.get<double>();
  if (!std::isfinite(out)) fail(path, "is not finite");  // only a json built in C++ can be
}

inline void read(const json& j, std::size_t& out, const std::string& path) {
  if (j.is_number_unsigned()) {
    out = j.get<std::uint64_t>();
  } else if (j.is_number_integer()) {  // negative once parsed; any sign if built in C++
    const std::int64_t v = j.get<std::int64_t>();
    if (v < 0) fail(path, "must be >= 0, got " + std::to_string(v));
    out = static_cast<std::size_t>(v);
  } else {
    wrong_type(j, path, "a non-negative integer");
  }
}

inline void read(const json& j, std::int64_t& out, const std::string& path) {
  if (j.is_number_unsigned()) {
    const std::uint64_t v = j.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(path, "is " + std::to_string(v) + ", beyond the 64-bit signed range");
    out = static_cast<std::int64_t>(v);
  } else if (j.is_number_integer()) {
    out = j.get<std::int64_t>();
  } else {
    wrong_type(j, path, "an integer");
  }
}

inline void read(const json& j, std::string& out, const std::string& path) {
  if (!j.is_string()) wrong_type(j, path, "a string");
  out = j.get<std::string>();
}

template <named_enum E>
void read(const json& j, E& out, const std::string& path) {
  if (!j.is_string()) wrong_type(j, path, "a name");
  const std::string& name = j.get_ref<const std::string&>();
  if (const std::optional<E> value = parse_enum<E>(name)) {
    out = *value;
    return;
  }
  std::vector<std::string_view> names;
  std::string list;
  for (const auto& [v, n] : enum_names<E>::table) {
    names.push_back(n);
    list += (list.empty() ? "" : ", ") + std::string(n);
  }
  fail(path, "unknown name " + found(j).substr(std::string_view("string ").size()) + did_you_mean(name, names) +
                 "; expected one of: " + list);
}

template <class T>
void read(const json& j, std::optional<T>& out, const std::string& path) {
  if (j.is_null()) {
    out.reset();
    return;
  }
  T value{};
  read(j, value, path);
  out = std::move(value);
}

template <class T>
void read(const json& j, std::vector<T>& out, const std::string& path) {
  if (!j.is_array()) wrong_type(j, path, "an array");
  out.clear();
  out.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    T value{};
    read(j[i], value, element_path(path, i));
    out.push_back(std::move(value));
  }
}

// Fields absent from `j` keep the value `out` has on entry (its default).
template <described_config T>
void read(const json& j, T& out, const std::string& path) {
  if (!j.is_object()) wrong_type(j, path, "an object");
  std::vector<std::string_view> keys;
  for_each_field(out, [&](std::string_view key, auto&) { keys.push_back(key); });
  for (const auto& [key, value] : j.items()) {
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    for (const removed_key& removed : removed_keys_of<T>())
      if (removed.key == key)
        fail(member_path(path, key), "removed key: set " + std::string(removed.instead));
    fail(member_path(path, key), "unknown key" + did_you_mean(key, keys));
  }
  for_each_field(out, [&](std::string_view key, auto& member) {
    const auto it = j.find(key);
    if (it != j.end())
      read(*it, member, member_path(path, key));
    else if constexpr (every_field_required<T>)
      fail(member_path(path, key), "is missing");
  });
}

// {"ppo_clip": {...}}: exactly one key, naming the alternative. The alternative's fields
// absent from `j` keep the values `out` has on entry when it holds that alternative
// already, else the alternative's defaults.
template <described_variant V>
void read(const json& j, V& out, const std::string& path) {
  constexpr auto& names = variant_names<V>::names;
  const std::string expected =
      "an object with one key naming the alternative (one of: " + alternatives_list<V>() + ")";
  if (j.is_string() &&
      std::find(names.begin(), names.end(), j.get_ref<const std::string&>()) != names.end())
    fail(path, "expected " + expected + ", got " + found(j) + "; write {" + j.dump() + ": {}}");
  if (!j.is_object()) wrong_type(j, path, expected);
  if (j.size() != 1) {
    std::string keys;
    for (const auto& [key, value] : j.items()) keys.append(keys.empty() ? "" : ", ").append(key);
    fail(path, (j.empty() ? std::string("has no key")
                          : "has " + std::to_string(j.size()) + " keys (" + keys + ")") +
                   "; expected exactly one, naming the alternative chosen (one of: " +
                   alternatives_list<V>() + ")");
  }
  const std::string& key = j.begin().key();
  const auto chosen =
      static_cast<std::size_t>(std::find(names.begin(), names.end(), key) - names.begin());
  for (const removed_key& old : removed_alternatives<V>::list)
    if (old.key == key)
      fail(member_path(path, key), "removed alternative: write " + std::string(old.instead));
  if (chosen == names.size())
    fail(member_path(path, key), "unknown alternative" + did_you_mean(key, names) +
                                     "; expected one of: " + alternatives_list<V>());
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    const auto read_alternative = [&]<std::size_t A>(std::integral_constant<std::size_t, A>) {
      if (out.index() != A) out.template emplace<A>();
      read(j.begin().value(), std::get<A>(out), member_path(path, key));
    };
    ((chosen == I ? read_alternative(std::integral_constant<std::size_t, I>{}) : void()), ...);
  }(std::make_index_sequence<std::variant_size_v<V>>{});
}

// ---- writing ---------------------------------------------------------------------------

inline ordered_json write(bool v, const std::string&) { return v; }
inline ordered_json write(std::size_t v, const std::string&) { return v; }
inline ordered_json write(std::int64_t v, const std::string&) { return v; }

inline ordered_json write(double v, const std::string& path) {
  if (!std::isfinite(v)) fail(path, "is not finite, which JSON cannot hold");
  return v;
}

inline ordered_json write(const std::string& v, const std::string& path) {
  ordered_json j = v;
  try {
    (void)j.dump();  // nlohmann checks UTF-8 only when it prints; check here, naming the field
  } catch (const nlohmann::json::exception&) {
    fail(path, "is not valid UTF-8, which JSON text cannot hold");
  }
  return j;
}

template <named_enum E>
ordered_json write(E v, const std::string& path) {
  const std::string_view name = enum_name(v);
  if (name.empty())
    fail(path, "holds value " + std::to_string(static_cast<long long>(v)) + ", which is not an enumerator");
  return std::string(name);
}

template <coded_json T>
ordered_json write(const T& v, const std::string& path) {
  return json_codec<T>::write(v, path);
}

template <class T>
ordered_json write(const std::optional<T>& v, const std::string& path);
template <class T>
ordered_json write(const std::vector<T>& v, const std::string& path);
template <described_config T>
ordered_json write(const T& v, const std::string& path);
template <described_variant V>
ordered_json write(const V& v, const std::string& path);

template <class T>
ordered_json write(const std::optional<T>& v, const std::string& path) {
  return v ? write(*v, path) : ordered_json(nullptr);
}

template <class T>
ordered_json write(const std::vector<T>& v, const std::string& path) {
  ordered_json j = ordered_json::array();
  for (std::size_t i = 0; i < v.size(); ++i) j.push_back(write(v[i], element_path(path, i)));
  return j;
}

template <described_config T>
ordered_json write(const T& v, const std::string& path) {
  ordered_json j = ordered_json::object();
  for_each_field(v, [&](std::string_view key, const auto& member) {
    j[std::string(key)] = write(member, member_path(path, key));
  });
  return j;
}

template <described_variant V>
ordered_json write(const V& v, const std::string& path) {
  if (v.valueless_by_exception()) fail(path, "holds no alternative (left empty by an exception)");
  return std::visit(
      [&](const auto& alternative) {
        const std::string_view name =
            config_fields<std::remove_cvref_t<decltype(alternative)>>::alternative;
        ordered_json j = ordered_json::object();
        j[std::string(name)] = write(alternative, member_path(path, name));
        return j;
      },
      v);
}

// Refused after reading: a stage its stage type would refuse.
inline void validate_stage(const stage_config& c, const std::string& path) {
  if (c.kind == stage_kind::mopd)
    validate_mopd_config(c, /*has_reward=*/true, path);  // the reward is known when built
  else
    validate_grpo_config(c, path);
}

// Runs f; a cascade_rl::error from it gets `where` in front of its location.
template <class F>
auto within(const std::string& where, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const error& e) {
    throw e.with_context(where);
  }
}

inline std::string schedule_file(const std::filesystem::path& path) {
  return "schedule file '" + path.string() + "'";
}

}  // namespace detail::config_json

// ---- one stage --------------------------------------------------------------------------

[[nodiscard]] inline nlohmann::ordered_json stage_config_to_json(const stage_config& config) {
  return detail::config_json::write(config, "stage");
}

// A stage from `j`, validated; `path` is where `j` sits in its document, for errors.
[[nodiscard]] inline stage_config stage_config_from_json(const nlohmann::json& j,
                                                         const std::string& path = "stage") {
  stage_config config;
  detail::config_json::read(j, config, path);
  detail::config_json::validate_stage(config, path);
  return config;
}

// ---- a schedule -------------------------------------------------------------------------

// {"stages": [...]}: an object, so that later versions can add keys beside the stages.
[[nodiscard]] inline nlohmann::ordered_json schedule_to_json(const std::vector<stage_config>& stages) {
  return {{"stages", detail::config_json::write(stages, "stages")}};
}

// From {"stages": [...]} or a bare array of stages (whose paths are "stages[i]" too).
// Every stage is validated, then the schedule as a whole (unique names, one evaluation
// set per domain); an empty schedule is refused.
[[nodiscard]] inline std::vector<stage_config> schedule_from_json(const nlohmann::json& j) {
  namespace cj = detail::config_json;
  const nlohmann::json* list = &j;
  if (j.is_object()) {
    for (const auto& [key, value] : j.items())
      if (key != "stages") detail::fail(key, "unknown key" + detail::did_you_mean(key, std::vector{"stages"}));
    if (!j.contains("stages")) detail::fail("stages", "is missing: a schedule is {\"stages\": [...]}");
    list = &j.at("stages");
  } else if (!j.is_array()) {
    cj::wrong_type(j, "(root)", "an object {\"stages\": [...]} or an array of stages");
  }
  if (!list->is_array()) cj::wrong_type(*list, "stages", "an array of stages");
  if (list->empty()) detail::fail("stages", "is empty: a schedule needs at least one stage");
  std::vector<stage_config> stages;
  for (std::size_t i = 0; i < list->size(); ++i)
    stages.push_back(stage_config_from_json((*list)[i], detail::element_path("stages", i)));
  detail::validate_stage_set(stages, "stages");
  return stages;
}

// JSON text, two-space indents, ending in a newline.
[[nodiscard]] inline std::string schedule_to_string(const std::vector<stage_config>& stages) {
  return schedule_to_json(stages).dump(2) + "\n";
}

// From JSON text (comments allowed, repeated keys refused; config_json_text.hpp).
[[nodiscard]] inline std::vector<stage_config> parse_schedule(std::string_view text) {
  return schedule_from_json(detail::parse_config_json(text, "stages"));
}

// Errors name the file before the location: "schedule file 'a.json': stages[1].steps: is 0".
[[nodiscard]] inline std::vector<stage_config> load_schedule_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) detail::fail(detail::config_json::schedule_file(path), "cannot be opened");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) detail::fail(detail::config_json::schedule_file(path), "cannot be read");
  return detail::config_json::within(detail::config_json::schedule_file(path),
                                     [&] { return parse_schedule(text); });
}

// Written atomically: a reader sees the old file or the new one, never half of one.
inline void save_schedule_file(const std::filesystem::path& path, const std::vector<stage_config>& stages) {
  const std::string text = detail::config_json::within(detail::config_json::schedule_file(path),
                                                       [&] { return schedule_to_string(stages); });
  detail::write_file_atomically(path, text, "schedule file");
}

}  // namespace cascade_rl
