#pragma once
// The word-level vocabulary of the demo's synthetic tasks: a prompt or a response is
// text whose words are tokens, separated by single spaces. Token 0 ends a response,
// token 1 separates the prompt from the response, token 2 stands before the first
// prompt token (it is never sampled).

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace demo {

inline constexpr std::int32_t eos = 0;
inline constexpr std::int32_t sep = 1;
inline constexpr std::int32_t bos = 2;

inline const std::vector<std::string>& vocabulary() {
  static const std::vector<std::string> words = {
      "<eos>", "<sep>", "<bos>",
      "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
      "a", "b", "c", "d", "e", "f", "g", "h",
      // instruction following (constraints on a chat reply)
      "len", "start", "last", "only",
      // multiple choice
      "mcq", "?", "A", "B", "C", "D",
      // structured output
      "json", "{", "}", ":", ",",
      // tool calls
      "tool", "call", "(", ")", "get", "put", "sum",
      // chat (RLHF)
      "chat", "greet", "help", "hi", "hello", "please", "thanks", "sure", "ok", "sorry", "bad", "no",
      // long context
      "ctx", ".",
      // code: the tiny language and its specification
      "code", "x", "*", "+", "-", "inc", "dec", "dbl", "add", "sub", "rep", "end", "wnz",
      // code: a specification of two steps
      "then",
      // SWE: the agent's tools ("show" the file, a one-line hunk "@ L - old + new",
      // "test", "submit") and what they answer ("|" before the file's words, ok/no,
      // pass/fail)
      "swe", "|", "@", "show", "test", "submit", "pass", "fail"};
  return words;
}

inline std::int32_t vocabulary_size() { return static_cast<std::int32_t>(vocabulary().size()); }

// The id of a word; throws std::invalid_argument naming an unknown one.
inline std::int32_t token_id(std::string_view word) {
  static const std::unordered_map<std::string, std::int32_t> ids = [] {
    std::unordered_map<std::string, std::int32_t> m;
    for (std::size_t i = 0; i < vocabulary().size(); ++i) m[vocabulary()[i]] = static_cast<std::int32_t>(i);
    return m;
  }();
  const auto it = ids.find(std::string(word));
  if (it == ids.end()) throw std::invalid_argument("demo vocabulary: unknown word '" + std::string(word) + "'");
  return it->second;
}

inline std::vector<std::int32_t> encode(std::string_view text) {
  std::vector<std::int32_t> out;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    std::size_t j = i;
    while (j < text.size() && text[j] != ' ') ++j;
    if (j > i) out.push_back(token_id(text.substr(i, j - i)));
    i = j;
  }
  return out;
}

// Words joined by spaces; end-of-sequence is left out.
inline std::string decode(std::span<const std::int32_t> tokens) {
  std::string out;
  for (std::int32_t t : tokens) {
    if (t == eos) continue;
    if (t < 0 || t >= vocabulary_size()) throw std::invalid_argument("demo vocabulary: bad token id");
    if (!out.empty()) out += ' ';
    out += vocabulary()[static_cast<std::size_t>(t)];
  }
  return out;
}

inline bool is_digit(std::int32_t t) { return t >= token_id("0") && t <= token_id("9"); }
inline int digit_value(std::int32_t t) { return t - token_id("0"); }
inline std::int32_t digit_token(int d) { return token_id("0") + d; }
inline std::string digit_word(int d) { return std::string(1, static_cast<char>('0' + d)); }

}  // namespace demo
