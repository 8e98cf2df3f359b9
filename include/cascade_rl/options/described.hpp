#pragma once
// A struct's fields by name: the one description that config readers, writers and
// comparisons walk, so that they cannot disagree about which fields exist. An option
// struct describes itself beside its definition (config_fields<T> below); the engine
// derives its config from those descriptions instead of mirroring them field by field.
//
// A description is a specialisation of config_fields<T> with
//   static constexpr std::tuple list{config_field{"key", &T::member}, ...};
// and optionally
//   static constexpr std::string_view alternative = "name";  // its name in a variant
//   static constexpr auto aggregation = &T::aggregation;     // a loss's aggregation,
//       which a stage sets once for every rule (update.aggregation), so not in `list`
//   static constexpr bool every_field_required = true;       // saved states
//   static constexpr std::array removed{removed_key{...}};   // keys of old versions
// lists_every_member<T> counts T's members against the description, so a member added
// without being described fails to compile instead of being dropped from config files.

#include <array>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace cascade_rl::detail {

// A pointer to member, named: nvcc's front end prints `M S::*m` back as `M (S::*m)`,
// which GCC's -Wparentheses then refuses in CUDA sources that include the options.
template <class S, class M>
using member_pointer = M S::*;

template <class S, class M>
struct config_field {
  using member_type = M;
  std::string_view key;
  member_pointer<S, M> member;

  template <class Object>
  [[nodiscard]] constexpr auto& of(Object& object) const {
    return object.*member;
  }
};
template <class S, class M>
config_field(std::string_view, member_pointer<S, M>) -> config_field<S, M>;

// A field of a member struct listed as the outer struct's own (a rule's loss options:
// "update.rule.cispo.clip_low" is rule.loss.clip_low).
template <class S, class O, class M>
struct nested_config_field {
  std::string_view key;
  member_pointer<S, O> outer;
  member_pointer<O, M> inner;

  template <class Object>
  [[nodiscard]] constexpr auto& of(Object& object) const {
    return (object.*outer).*inner;
  }
};

template <class T>
struct config_fields;  // static constexpr std::tuple list{config_field...}

template <class T>
concept described_config = requires { config_fields<T>::list; };

// The fields of `inner`'s description as fields of S reached through S::*outer.
template <class S, class O>
  requires described_config<O>
constexpr auto nested_fields(O S::*outer) {
  return std::apply(
      [&](const auto&... field) {
        return std::tuple{nested_config_field<S, O,
                                              typename std::remove_cvref_t<decltype(field)>::member_type>{
            field.key, outer, field.member}...};
      },
      config_fields<O>::list);
}

// A config file may leave out a field (it keeps its default); a saved state may not: a
// struct whose config_fields<T> has `static constexpr bool every_field_required = true`
// is read with every listed key present, a missing one refused by its path.
template <class T>
constexpr bool every_field_required = [] {
  if constexpr (requires { config_fields<T>::every_field_required; })
    return config_fields<T>::every_field_required;
  else
    return false;
}();

// A key that config files of an earlier version held and that now means nothing: the
// reader refuses it by name and says what to set instead (an optional member
// `static constexpr std::array removed{removed_key...}` of config_fields<T>).
struct removed_key {
  std::string_view key;
  std::string_view instead;  // the field that now carries its meaning
};

template <class T>
constexpr std::span<const removed_key> removed_keys_of() {
  if constexpr (requires { config_fields<T>::removed; })
    return config_fields<T>::removed;
  else
    return {};
}

// A variant of described structs is written as an object with one key, the name of the
// alternative it holds ({"ppo_clip": {...}}): each alternative names itself, once, in
// its config_fields (`static constexpr std::string_view alternative = "ppo_clip";`).
template <class T>
concept variant_alternative = described_config<T> && requires {
  { config_fields<T>::alternative } -> std::convertible_to<std::string_view>;
};

template <class... Names>
constexpr bool distinct_names(const Names&... names) {
  const std::array<std::string_view, sizeof...(Names)> list{names...};
  for (std::size_t i = 0; i < list.size(); ++i)
    for (std::size_t j = i + 1; j < list.size(); ++j)
      if (list[i] == list[j]) return false;
  return true;
}

template <class V>
struct variant_names;  // names: the alternatives' names, in the variant's order

template <class... A>
  requires(variant_alternative<A> && ...)
struct variant_names<std::variant<A...>> {
  static constexpr std::array<std::string_view, sizeof...(A)> names{
      config_fields<A>::alternative...};
  static_assert(distinct_names(config_fields<A>::alternative...),
                "two alternatives of a variant share a name in config_fields");
};

template <class V>
concept described_variant = requires { variant_names<V>::names; };

// Names of alternatives an earlier version had (removed_alternatives<V>::list, an array
// of removed_key: the old name and what to write instead); the reader refuses them so.
template <class V>
struct removed_alternatives {
  static constexpr std::array<removed_key, 0> list{};
};

// "on_policy, ppo_clip": a variant's alternatives, for messages.
template <described_variant V>
std::string alternatives_list() {
  std::string list;
  for (const std::string_view name : variant_names<V>::names)
    list.append(list.empty() ? "" : ", ").append(name);
  return list;
}

// f(key, member of `object`) for every listed field, in order.
template <class Object, class F>
  requires described_config<std::remove_const_t<Object>>
void for_each_field(Object& object, F&& f) {
  std::apply([&](const auto&... field) { (f(field.key, field.of(object)), ...); },
             config_fields<std::remove_const_t<Object>>::list);
}

// The keys of T's fields, in order.
template <described_config T>
std::vector<std::string> field_keys() {
  std::vector<std::string> keys;
  std::apply([&](const auto&... field) { (keys.emplace_back(field.key), ...); },
             config_fields<T>::list);
  return keys;
}

// The number of members of an aggregate: the largest N for which T{x_1, ..., x_N}
// compiles, with x_i convertible to anything (each initialises one member; no brace
// elision happens, since the conversion to the member's own type exists).
struct to_any_member {
  template <class M>
  operator M() const;  // never defined: used in unevaluated contexts only
};

template <class T, std::size_t... I>
constexpr bool brace_initialisable(std::index_sequence<I...>) {
  return requires { T{(static_cast<void>(I), to_any_member{})...}; };
}

template <class T, std::size_t N = 0>
constexpr std::size_t member_count() {
  if constexpr (brace_initialisable<T>(std::make_index_sequence<N + 1>{}))
    return member_count<T, N + 1>();
  else
    return N;
}

// Whether a description holds a loss's aggregation apart from its list.
template <class T>
concept described_loss_options = described_config<T> && requires { config_fields<T>::aggregation; };

template <described_config T>
constexpr bool lists_every_member =
    std::tuple_size_v<decltype(config_fields<T>::list)> + (described_loss_options<T> ? 1 : 0) ==
    member_count<T>();

}  // namespace cascade_rl::detail
