#pragma once
// The synthetic, verifiable domains of the demo, one generator and one verifier each.
// A task is a prompt (its text is what the model reads) and a demonstration (a correct
// response, for the supervised warm start). Every verifier returns a score in [0, 1];
// a truncated response (no end-of-sequence) scores 0.
//
//   instruction_following  "if len 4 start b last c only b c d"     -> "b d c c"
//   mcqa                   "mcq A c B a C d ? a"                    -> "B"
//   structured_output      "json b 5 d 2"                           -> "{ b : 5 , d : 2 }"
//   tool_calling           "tool sum 3 4"                           -> "call sum ( 3 , 4 )"
//   chat                   "chat greet"                             -> "hi please sure ok"
//   long_context           "ctx a 3 b 7 c 1 . . . (many) . ? b"     -> "7"
//   code                   "code x * 4 + 3"                         -> "dbl dbl add 3"
//   swe                    "swe x * 2 + 3 | dbl sub 3"              -> "fix 2 add 3"
// (chat is judged by the Bradley-Terry reward model during RLHF, and by the hidden
// gold preference in evaluation: see reward_model.hpp.)

#include <algorithm>
#include <initializer_list>
#include <string_view>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <cascade_rl/cascade/concepts.hpp>
#include <cascade_rl/cascade/prompt.hpp>

#include "interpreter.hpp"
#include "reward_model.hpp"
#include "vocabulary.hpp"

namespace demo {

namespace cr = cascade_rl;

inline const std::vector<std::string>& domains() {
  static const std::vector<std::string> d = {"instruction_following", "mcqa", "structured_output",
                                             "tool_calling", "chat", "long_context", "code", "swe"};
  return d;
}

struct task {
  cr::prompt prompt;
  std::vector<std::int32_t> demonstration;  // ends with eos
};

namespace detail {

inline int uniform(std::mt19937_64& rng, int lo, int hi) {  // [lo, hi]
  return lo + static_cast<int>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
}
inline std::string letter(int k) { return std::string(1, static_cast<char>('a' + k)); }
// Words joined by single spaces, appended to `text` (g++ 12 warns falsely about
// chains of "literal" + std::string, so the text is built this way).
inline void add_words(std::string& text, std::initializer_list<std::string_view> words) {
  for (std::string_view w : words) {
    if (!text.empty()) text += ' ';
    text += w;
  }
}
inline std::string words(std::initializer_list<std::string_view> w) {
  std::string s;
  add_words(s, w);
  return s;
}
// k distinct letters among a..h
inline std::vector<int> distinct_letters(std::mt19937_64& rng, int k) {
  std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
  for (int i = 7; i > 0; --i) std::swap(all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(uniform(rng, 0, i))]);
  all.resize(static_cast<std::size_t>(k));
  return all;
}
inline std::vector<std::int32_t> tokens_of(const std::string& text) {
  auto t = encode(text);
  t.push_back(eos);
  return t;
}
inline bool is_letter(std::int32_t t) { return t >= token_id("a") && t <= token_id("h"); }

// The words of the prompt after the first (the task keyword).
inline std::vector<std::int32_t> prompt_words(const cr::prompt& p) {
  auto t = encode(p.text);
  if (!t.empty()) t.erase(t.begin());
  return t;
}

// "x * A + B" / "x * A - B" at the start of `words` (from index i): a and signed b.
inline bool parse_spec(const std::vector<std::int32_t>& w, std::size_t i, int& a, int& b) {
  if (w.size() < i + 5 || w[i] != token_id("x") || w[i + 1] != token_id("*") || !is_digit(w[i + 2]) ||
      !is_digit(w[i + 4]))
    return false;
  a = digit_value(w[i + 2]);
  b = digit_value(w[i + 4]);
  if (w[i + 3] == token_id("-")) b = -b;
  else if (w[i + 3] != token_id("+")) return false;
  return true;
}

// The straight-line program for a*x + b (a in {1, 2, 4}).
inline std::vector<std::string> canonical_lines(int a, int b) {
  std::vector<std::string> lines;
  for (int k = a; k > 1; k /= 2) lines.push_back("dbl");
  if (b > 0) lines.push_back(words({"add", digit_word(b)}));
  if (b < 0) lines.push_back(words({"sub", digit_word(-b)}));
  return lines;
}
inline std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) add_words(s, {l});
  return s;
}

}  // namespace detail

// ---- generators ----------------------------------------------------------------------

inline task make_instruction_following(std::mt19937_64& rng) {
  using namespace detail;
  const int n = uniform(rng, 2, 6);
  const std::vector<int> allowed = distinct_letters(rng, uniform(rng, 2, 4));
  const int first = allowed[static_cast<std::size_t>(uniform(rng, 0, static_cast<int>(allowed.size()) - 1))];
  const int last = allowed[static_cast<std::size_t>(uniform(rng, 0, static_cast<int>(allowed.size()) - 1))];
  std::string text = words({"if len", digit_word(n), "start", letter(first), "last", letter(last), "only"});
  for (int k : allowed) add_words(text, {letter(k)});
  std::string reply = letter(first);
  for (int i = 1; i < n - 1; ++i)
    add_words(reply, {letter(allowed[static_cast<std::size_t>(uniform(rng, 0, static_cast<int>(allowed.size()) - 1))])});
  add_words(reply, {letter(last)});
  return {{0, "instruction_following", text, ""}, tokens_of(reply)};
}

inline task make_mcqa(std::mt19937_64& rng) {
  using namespace detail;
  const int options = uniform(rng, 3, 4);
  const std::vector<int> contents = distinct_letters(rng, options);
  const int right = uniform(rng, 0, options - 1);
  const char* names[] = {"A", "B", "C", "D"};
  std::string text = "mcq";
  for (int k = 0; k < options; ++k) add_words(text, {names[k], letter(contents[static_cast<std::size_t>(k)])});
  add_words(text, {"?", letter(contents[static_cast<std::size_t>(right)])});
  return {{0, "mcqa", text, names[right]}, tokens_of(names[right])};
}

inline task make_structured_output(std::mt19937_64& rng) {
  using namespace detail;
  const int pairs = uniform(rng, 1, 2);
  const std::vector<int> keys = distinct_letters(rng, pairs);
  std::string text = "json", reply = "{";
  for (int k = 0; k < pairs; ++k) {
    const std::string v = digit_word(uniform(rng, 0, 9));
    add_words(text, {letter(keys[static_cast<std::size_t>(k)]), v});
    if (k) add_words(reply, {","});
    add_words(reply, {letter(keys[static_cast<std::size_t>(k)]), ":", v});
  }
  add_words(reply, {"}"});
  return {{0, "structured_output", text, ""}, tokens_of(reply)};
}

inline task make_tool_calling(std::mt19937_64& rng) {
  using namespace detail;
  const char* names[] = {"get", "put", "sum"};
  const std::string name = names[uniform(rng, 0, 2)];
  const int args = uniform(rng, 1, 2);
  std::string text = words({"tool", name}), reply = words({"call", name, "("});
  for (int k = 0; k < args; ++k) {
    const std::string v = digit_word(uniform(rng, 0, 9));
    add_words(text, {v});
    if (k) add_words(reply, {","});
    add_words(reply, {v});
  }
  add_words(reply, {")"});
  return {{0, "tool_calling", text, ""}, tokens_of(reply)};
}

// The demonstrations are mediocre on purpose (random chat words): RLHF has room to work.
inline task make_chat(std::mt19937_64& rng) {
  const int topic = detail::uniform(rng, 0, 1);
  std::vector<std::int32_t> reply;
  const int n = detail::uniform(rng, 2, 5);
  for (int i = 0; i < n; ++i) reply.push_back(token_id(chat_words()[rng() % chat_words().size()]));
  reply.push_back(eos);
  return {{0, "chat", topic == 0 ? "chat greet" : "chat help", ""}, reply};
}

inline task make_long_context(std::mt19937_64& rng) {
  using namespace detail;
  const int pairs = uniform(rng, 4, 6);
  const std::vector<int> keys = distinct_letters(rng, pairs);
  std::vector<int> values;
  std::string text = "ctx";
  for (int k = 0; k < pairs; ++k) {
    values.push_back(uniform(rng, 0, 9));
    add_words(text, {letter(keys[static_cast<std::size_t>(k)]), digit_word(values.back())});
  }
  const int filler = uniform(rng, 24, 44);
  for (int i = 0; i < filler; ++i) add_words(text, {"."});
  const int asked = uniform(rng, 0, pairs - 1);
  add_words(text, {"?", letter(keys[static_cast<std::size_t>(asked)])});
  const std::string answer = digit_word(values[static_cast<std::size_t>(asked)]);
  return {{0, "long_context", text, answer}, tokens_of(answer)};
}

inline void random_spec(std::mt19937_64& rng, int& a, int& b) {
  const int as[] = {1, 2, 4};
  do {
    a = as[detail::uniform(rng, 0, 2)];
    b = detail::uniform(rng, -5, 5);
  } while (a == 1 && b == 0);
}
inline std::string spec_text(int a, int b) {
  return detail::words({"x *", digit_word(a), b < 0 ? "-" : "+", digit_word(b < 0 ? -b : b)});
}

inline task make_code(std::mt19937_64& rng) {
  int a = 1, b = 0;
  random_spec(rng, a, b);
  std::vector<std::string> lines = detail::canonical_lines(a, b);
  if (a == 4 && rng() % 2 == 0) {  // a loop now and then
    lines.erase(lines.begin(), lines.begin() + 2);
    lines.insert(lines.begin(), "rep 2 dbl end");
  }
  return {{0, "code", detail::words({"code", spec_text(a, b)}), ""}, detail::tokens_of(detail::join(lines))};
}

// One line of the canonical program is wrong: a wrong argument, a wrong sign, or an
// inc where a dbl belongs. The demonstration patches that line.
inline task make_swe(std::mt19937_64& rng) {
  int a = 1, b = 0;
  random_spec(rng, a, b);
  std::vector<std::string> lines = detail::canonical_lines(a, b);
  const std::size_t line = static_cast<std::size_t>(detail::uniform(rng, 0, static_cast<int>(lines.size()) - 1));
  const std::string right = lines[line];
  std::string& wrong = lines[line];
  if (wrong == "dbl") {
    wrong = "inc";
  } else {
    const int arg = b < 0 ? -b : b;
    if (rng() % 2 == 0) {
      wrong = detail::words({b < 0 ? "add" : "sub", digit_word(arg)});
    } else {
      int other = arg;
      while (other == arg) other = detail::uniform(rng, 1, 9);
      wrong = detail::words({b < 0 ? "sub" : "add", digit_word(other)});
    }
  }
  const std::string text = detail::words({"swe", spec_text(a, b), "|", detail::join(lines)});
  return {{0, "swe", text, ""}, detail::tokens_of(detail::words({"fix", digit_word(static_cast<int>(line) + 1), right}))};
}

inline task make_task(const std::string& domain, std::mt19937_64& rng) {
  if (domain == "instruction_following") return make_instruction_following(rng);
  if (domain == "mcqa") return make_mcqa(rng);
  if (domain == "structured_output") return make_structured_output(rng);
  if (domain == "tool_calling") return make_tool_calling(rng);
  if (domain == "chat") return make_chat(rng);
  if (domain == "long_context") return make_long_context(rng);
  if (domain == "code") return make_code(rng);
  if (domain == "swe") return make_swe(rng);
  throw std::invalid_argument("demo: unknown domain '" + domain + "'");
}

// n tasks of a domain, ids from first_id, from their own seed.
inline std::vector<task> make_tasks(const std::string& domain, std::size_t n, std::uint64_t seed,
                                    std::int64_t first_id = 0) {
  std::mt19937_64 rng(seed);
  std::vector<task> out;
  for (std::size_t i = 0; i < n; ++i) {
    task t = make_task(domain, rng);
    t.prompt.id = first_id + static_cast<std::int64_t>(i);
    out.push_back(std::move(t));
  }
  return out;
}

inline std::vector<cr::prompt> prompts_of(const std::vector<task>& tasks) {
  std::vector<cr::prompt> out;
  for (const task& t : tasks) out.push_back(t.prompt);
  return out;
}

// ---- verifiers -----------------------------------------------------------------------
// `reply`: the response tokens without the end-of-sequence.

inline double verify_instruction_following(const cr::prompt& p, const std::vector<std::int32_t>& reply) {
  const auto w = detail::prompt_words(p);  // len N start X last Y only S...
  if (w.size() < 8 || reply.empty()) return 0.0;
  const auto n = static_cast<std::size_t>(digit_value(w[1]));
  const std::vector<std::int32_t> allowed(w.begin() + 7, w.end());
  int ok = 0;
  ok += reply.size() == n;
  ok += reply.front() == w[3];
  ok += reply.back() == w[5];
  ok += std::all_of(reply.begin(), reply.end(),
                    [&](std::int32_t t) { return std::find(allowed.begin(), allowed.end(), t) != allowed.end(); });
  return ok / 4.0;
}

inline double verify_mcqa(const cr::prompt& p, const std::vector<std::int32_t>& reply) {
  return reply.size() == 1 && reply[0] == token_id(p.reference) ? 1.0 : 0.0;
}

// "{ k : v , k : v }": 0 unless well formed; then 0.5 + 0.5 * fraction of pairs right.
inline double verify_structured_output(const cr::prompt& p, const std::vector<std::int32_t>& reply) {
  const auto w = detail::prompt_words(p);
  std::vector<std::pair<std::int32_t, std::int32_t>> want, got;
  for (std::size_t i = 0; i + 1 < w.size(); i += 2) want.emplace_back(w[i], w[i + 1]);
  if (reply.size() < 5 || reply.front() != token_id("{") || reply.back() != token_id("}")) return 0.0;
  std::size_t i = 1;
  for (;;) {
    if (i + 3 > reply.size() - 1 || !detail::is_letter(reply[i]) || reply[i + 1] != token_id(":") ||
        !is_digit(reply[i + 2]))
      return 0.0;
    got.emplace_back(reply[i], reply[i + 2]);
    i += 3;
    if (i == reply.size() - 1) break;
    if (reply[i] != token_id(",")) return 0.0;
    ++i;
  }
  std::size_t right = 0;
  for (std::size_t k = 0; k < std::min(want.size(), got.size()); ++k) right += want[k] == got[k];
  return 0.5 + 0.5 * static_cast<double>(right) / static_cast<double>(std::max(want.size(), got.size()));
}

// "call NAME ( d , d )": 0 unless well formed; then 0.5, +0.25 for the name, +0.25 for
// the arguments.
inline double verify_tool_calling(const cr::prompt& p, const std::vector<std::int32_t>& reply) {
  const auto w = detail::prompt_words(p);  // NAME d [d]
  if (reply.size() < 5 || reply[0] != token_id("call") || reply[2] != token_id("(") ||
      reply.back() != token_id(")"))
    return 0.0;
  const std::int32_t name = reply[1];
  if (name != token_id("get") && name != token_id("put") && name != token_id("sum")) return 0.0;
  std::vector<std::int32_t> args;  // d (, d)* between "(" and ")"
  for (std::size_t i = 3;; i += 2) {
    if (i + 1 >= reply.size() || !is_digit(reply[i])) return 0.0;
    args.push_back(reply[i]);
    if (i + 1 == reply.size() - 1) break;
    if (reply[i + 1] != token_id(",")) return 0.0;
  }
  double s = 0.5;
  if (!w.empty() && name == w[0]) s += 0.25;
  if (std::vector<std::int32_t>(w.begin() + 1, w.end()) == args) s += 0.25;
  return s;
}

inline double verify_long_context(const cr::prompt& p, const std::vector<std::int32_t>& reply) {
  return reply.size() == 1 && reply[0] == token_id(p.reference) ? 1.0 : 0.0;
}

inline double verify_code(const cr::prompt& p, const std::vector<std::int32_t>& reply) {
  int a = 0, b = 0;
  if (!detail::parse_spec(detail::prompt_words(p), 0, a, b)) return 0.0;
  return pass_rate(reply, a, b);
}

// "fix L OP [D]": replace line L (1-based) of the program after "|", then run the tests.
inline double verify_swe(const cr::prompt& p, const std::vector<std::int32_t>& reply) {
  const auto w = detail::prompt_words(p);
  int a = 0, b = 0;
  if (!detail::parse_spec(w, 0, a, b) || w.size() < 6 || w[5] != token_id("|")) return 0.0;
  // The program's lines: an op and, for add/sub, its digit.
  std::vector<std::vector<std::int32_t>> lines;
  for (std::size_t i = 6; i < w.size(); ++i) {
    if (is_digit(w[i]) && !lines.empty()) lines.back().push_back(w[i]);
    else lines.push_back({w[i]});
  }
  if (reply.size() < 3 || reply[0] != token_id("fix") || !is_digit(reply[1])) return 0.0;
  const int line = digit_value(reply[1]);
  if (line < 1 || line > static_cast<int>(lines.size())) return 0.0;
  lines[static_cast<std::size_t>(line - 1)].assign(reply.begin() + 2, reply.end());
  std::vector<std::int32_t> patched;
  for (const auto& l : lines) patched.insert(patched.end(), l.begin(), l.end());
  return pass_rate(patched, a, b);
}

// The reward of every stage: dispatches on the prompt's domain. Chat is scored by the
// reward model, except prompts whose reference is "gold" (the evaluation prompts),
// which the hidden gold preference scores. Safe to call from several threads.
struct task_reward {
  std::shared_ptr<const bt_reward_model> reward_model{};

  [[nodiscard]] double score(const cr::prompt& p, std::span<const std::int32_t> tokens, bool truncated) const {
    if (truncated || tokens.empty() || tokens.back() != eos) return 0.0;
    const std::vector<std::int32_t> reply(tokens.begin(), tokens.end() - 1);
    const std::string& d = p.domain;
    if (d == "instruction_following") return verify_instruction_following(p, reply);
    if (d == "mcqa") return verify_mcqa(p, reply);
    if (d == "structured_output") return verify_structured_output(p, reply);
    if (d == "tool_calling") return verify_tool_calling(p, reply);
    if (d == "long_context") return verify_long_context(p, reply);
    if (d == "code") return verify_code(p, reply);
    if (d == "swe") return verify_swe(p, reply);
    if (d == "chat") {
      const int topic = chat_topic(p.text);
      if (p.reference == "gold" || !reward_model) return gold_chat_score(topic, reply);
      return 1.0 / (1.0 + std::exp(-reward_model->score(topic, reply)));
    }
    throw std::invalid_argument("demo: no verifier for domain '" + d + "'");
  }
  double operator()(const cr::response_view& r) const {
    return score(r.input, r.tokens, r.finish == cr::finish_reason::truncated);
  }
};

}  // namespace demo
