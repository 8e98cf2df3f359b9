#pragma once
// The synthetic, verifiable domains of the demo, one generator and one verifier each.
// A task is a prompt (its text is what the model reads) and a demonstration (a correct
// response, for the supervised warm start). Every verifier returns a score in [0, 1];
// a truncated response (no end-of-sequence) scores 0.
//
// The domains differ the way real ones do: in response length (one token for MCQA and
// retrieval, up to thirteen for code, an episode of tool calls for SWE), in verification
// cost (code and SWE run programs: program_verifier.hpp, swe_agent.hpp; the others are
// instant), and in what they ask of the same words: instruction following puts length
// and wording constraints on a chat reply, while RLHF's reward model prefers long,
// chatty replies (reward_model.hpp).
//
//   instruction_following  "chat greet len 3 start hi last ok only hi ok sure"  -> "hi sure ok"
//   mcqa                   "mcq A c B a C d ? a"                    -> "B"
//   structured_output      "json b 5 d 2"                           -> "{ b : 5 , d : 2 }"
//   tool_calling           "tool sum 3 4"                           -> "call sum ( 3 , 4 )"
//   chat                   "chat greet"                             -> "hi please sure ok ..." (judged)
//   long_context           "ctx a 3 b 7 c 1 . . . (many) . ? b"     -> "7"
//   code                   "code x * 4 + 3 then * 2 - 1"            -> "dbl dbl add 3 dbl sub 1"
//   swe                    "swe x * 2 + 3 then * 1 - 2" (program.txt: dbl / sub 3 / sub 2)
//                          -> an episode: "show" | dbl sub 3 sub 2, "@ 2 - sub 3 + add 3" ok,
//                             "test" pass, "submit" (an agent with tools; swe_agent.hpp)

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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
  // Which demonstration tokens the warm start trains on (empty: all). An SWE episode's
  // observations are the environment's words, not the model's: mask 0.
  std::vector<std::uint8_t> demonstration_mask{};
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
    if (w.empty()) continue;
    if (!text.empty()) text += ' ';
    text += w;
  }
}
inline std::string words(std::initializer_list<std::string_view> w) {
  std::string s;
  add_words(s, w);
  return s;
}
// k distinct values among 0..n-1
inline std::vector<int> distinct(std::mt19937_64& rng, int n, int k) {
  std::vector<int> all(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) all[static_cast<std::size_t>(i)] = i;
  for (int i = n - 1; i > 0; --i)
    std::swap(all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(uniform(rng, 0, i))]);
  all.resize(static_cast<std::size_t>(k));
  return all;
}
// k distinct letters among a..h
inline std::vector<int> distinct_letters(std::mt19937_64& rng, int k) { return distinct(rng, 8, k); }
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

}  // namespace detail

// ---- the specification of code and SWE tasks -------------------------------------------
// f(x) is a pipeline of affine steps "x * A + B then * A - B ..." (A in {1, 2, 4},
// B a digit with its sign); the unit tests check f at test_inputs.

struct affine_step {
  int a = 1, b = 0;
  bool operator==(const affine_step&) const = default;
};
using specification = std::vector<affine_step>;

inline std::int64_t apply(const specification& s, std::int64_t x) {
  for (const affine_step& k : s) x = k.a * x + k.b;
  return x;
}
inline std::array<std::int64_t, std::size(test_inputs)> expected_outputs(const specification& s) {
  std::array<std::int64_t, std::size(test_inputs)> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = apply(s, test_inputs[i]);
  return out;
}

inline std::string spec_text(const specification& s) {
  std::string text = "x";
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (k) detail::add_words(text, {"then"});
    detail::add_words(text, {"*", digit_word(s[k].a), s[k].b < 0 ? "-" : "+", digit_word(s[k].b < 0 ? -s[k].b : s[k].b)});
  }
  return text;
}

// Parses "x * A +|- B (then * A +|- B)*" from words[i]; i ends after it.
inline std::optional<specification> parse_spec(const std::vector<std::int32_t>& w, std::size_t& i) {
  if (i >= w.size() || w[i] != token_id("x")) return std::nullopt;
  ++i;
  specification s;
  for (;;) {
    if (w.size() < i + 4 || w[i] != token_id("*") || !is_digit(w[i + 1]) || !is_digit(w[i + 3]))
      return std::nullopt;
    affine_step k{digit_value(w[i + 1]), digit_value(w[i + 3])};
    if (w[i + 2] == token_id("-")) k.b = -k.b;
    else if (w[i + 2] != token_id("+")) return std::nullopt;
    s.push_back(k);
    i += 4;
    if (i < w.size() && w[i] == token_id("then")) ++i;
    else return s;
  }
}

// The straight-line program of a specification, one instruction per line: dbl for
// each doubling, then add/sub B.
inline std::vector<std::string> canonical_lines(const specification& s) {
  std::vector<std::string> lines;
  for (const affine_step& k : s) {
    for (int m = k.a; m > 1; m /= 2) lines.push_back("dbl");
    if (k.b > 0) lines.push_back(detail::words({"add", digit_word(k.b)}));
    if (k.b < 0) lines.push_back(detail::words({"sub", digit_word(-k.b)}));
  }
  return lines;
}
inline std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) detail::add_words(s, {l});
  return s;
}

inline specification random_spec(std::mt19937_64& rng, std::size_t steps) {
  const int as[] = {1, 2, 4};
  specification s;
  while (s.size() < steps) {
    affine_step k{as[detail::uniform(rng, 0, 2)], detail::uniform(rng, -5, 5)};
    if (k.a == 1 && k.b == 0) continue;
    s.push_back(k);
  }
  return s;
}

// ---- generators ----------------------------------------------------------------------

// The words a constrained reply may use: the chat words that are not rude.
inline const std::vector<std::string>& polite_words() {
  static const std::vector<std::string> w = {"hi", "hello", "please", "thanks", "sure", "ok", "sorry", "help"};
  return w;
}

inline task make_instruction_following(std::mt19937_64& rng) {
  using namespace detail;
  const int n = uniform(rng, 2, 5);
  std::vector<std::string> allowed;
  for (int k : distinct(rng, static_cast<int>(polite_words().size()), uniform(rng, 2, 4)))
    allowed.push_back(polite_words()[static_cast<std::size_t>(k)]);
  const auto pick = [&] { return allowed[static_cast<std::size_t>(uniform(rng, 0, static_cast<int>(allowed.size()) - 1))]; };
  const std::string first = pick(), last = pick();
  std::string text = words({"chat", uniform(rng, 0, 1) == 0 ? "greet" : "help", "len", digit_word(n), "start",
                            first, "last", last, "only"});
  for (const auto& w : allowed) add_words(text, {w});
  std::string reply = first;
  for (int i = 1; i < n - 1; ++i) add_words(reply, {pick()});
  add_words(reply, {last});
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

// The demonstrations are mediocre on purpose (two to four random chat words): RLHF has
// room to work.
inline task make_chat(std::mt19937_64& rng) {
  const int topic = detail::uniform(rng, 0, 1);
  std::vector<std::int32_t> reply;
  const int n = detail::uniform(rng, 2, 4);
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

// Two steps; a quadrupling is now and then written as a loop.
inline task make_code(std::mt19937_64& rng) {
  const specification s = random_spec(rng, 2);
  std::vector<std::string> lines;
  for (const affine_step& k : s) {
    std::vector<std::string> part = canonical_lines({k});
    if (k.a == 4 && rng() % 2 == 0) {
      part.erase(part.begin(), part.begin() + 2);
      part.insert(part.begin(), "rep 2 dbl end");
    }
    lines.insert(lines.end(), part.begin(), part.end());
  }
  return {{0, "code", detail::words({"code", spec_text(s)}), ""}, detail::tokens_of(join(lines))};
}

// ---- SWE: a one-file repository and the agent's tools ---------------------------------
// The repository holds program.txt, the canonical program of a two-step specification
// with one wrong line (a wrong argument, a wrong sign, or an inc where a dbl belongs).
// The prompt says only what the program must compute; the agent reads the file and
// edits it with tools (swe_agent.hpp runs them as an environment), one per action:
//   show             -> "| dbl sub 3 sub 2": "|", then the file's words
//   @ L - old + new  -> "ok" when line L read `old` (it now reads `new`), else "no"
//   test             -> "pass" or "fail": the visible tests (swe_visible_tests inputs)
//   submit           -> ends the episode
// Anything else answers "no". The hidden tests check every unit-test input; the reward
// is the fraction they pass, as code's.

inline constexpr std::size_t swe_visible_tests = 3;  // the first three of test_inputs

using swe_file = std::vector<std::string>;  // the lines of program.txt

inline std::string swe_file_text(const swe_file& lines) {
  std::string text;
  for (const auto& l : lines) text += l + '\n';
  return text;
}
inline swe_file swe_file_of(std::string_view text) {
  swe_file lines;
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    lines.emplace_back(text.substr(0, eol));
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
  }
  return lines;
}

inline std::string swe_show(const swe_file& lines) { return detail::words({"|", join(lines)}); }

// "@ L - old + new" (L a digit, `old` up to the first "+"): line L must read `old`.
struct swe_hunk {
  std::size_t line = 0;  // 1-based
  std::string old_text, new_text;
};
inline std::optional<swe_hunk> parse_swe_hunk(std::string_view action) {
  std::vector<std::string> w;
  for (std::size_t i = 0; i < action.size();) {
    const std::size_t j = std::min(action.find(' ', i), action.size());
    if (j > i) w.emplace_back(action.substr(i, j - i));
    i = j + 1;
  }
  if (w.size() < 4 || w[0] != "@" || w[1].size() != 1 || w[1][0] < '1' || w[1][0] > '9' || w[2] != "-")
    return std::nullopt;
  const auto plus = std::find(w.begin() + 3, w.end(), "+");
  if (plus == w.end()) return std::nullopt;
  swe_hunk h{static_cast<std::size_t>(w[1][0] - '0'), {}, {}};
  for (auto k = w.begin() + 3; k != plus; ++k) detail::add_words(h.old_text, {*k});
  for (auto k = plus + 1; k != w.end(); ++k) detail::add_words(h.new_text, {*k});
  return h;
}
// Whether the hunk's context matched (then the line is replaced).
inline bool apply_swe_hunk(swe_file& lines, const swe_hunk& h) {
  if (h.line < 1 || h.line > lines.size() || lines[h.line - 1] != h.old_text) return false;
  lines[h.line - 1] = h.new_text;
  return true;
}

// How many of the tests on the first `inputs` unit-test inputs the file's program
// passes (the bounded interpreter; a file that does not parse passes none).
inline int swe_tests_passed(const swe_file& lines, const specification& spec, std::size_t inputs) {
  std::vector<std::int32_t> tokens;
  try {
    tokens = encode(join(lines));
  } catch (const std::invalid_argument&) {
    return 0;
  }
  const auto code = parse_program(tokens);
  if (!code) return 0;
  const auto expected = expected_outputs(spec);
  return tests_passed(*code, std::span<const std::int64_t>(expected).first(inputs));
}

// The specification of an SWE prompt ("swe x * A + B then ...").
inline std::optional<specification> swe_spec(const cr::prompt& p) {
  std::size_t i = 0;
  const auto w = detail::prompt_words(p);
  auto spec = parse_spec(w, i);
  if (!spec || i != w.size()) return std::nullopt;
  return spec;
}

// The scripted trajectory of the warm start: show, the hunk that fixes the file, test,
// submit; each action ends with <eos>, and only the actions are in the loss (mask 1).
inline void add_swe_turn(task& t, std::string_view action, std::string_view observation) {
  std::vector<std::int32_t> acted = encode(action);
  acted.push_back(eos);
  const std::vector<std::int32_t> seen = encode(observation);
  t.demonstration.insert(t.demonstration.end(), acted.begin(), acted.end());
  t.demonstration_mask.insert(t.demonstration_mask.end(), acted.size(), 1);
  t.demonstration.insert(t.demonstration.end(), seen.begin(), seen.end());
  t.demonstration_mask.insert(t.demonstration_mask.end(), seen.size(), 0);
}

inline task make_swe(std::mt19937_64& rng) {
  const specification s = random_spec(rng, 2);
  swe_file lines = canonical_lines(s);
  const std::size_t line = static_cast<std::size_t>(detail::uniform(rng, 0, static_cast<int>(lines.size()) - 1));
  const std::string right = lines[line];
  std::string& wrong = lines[line];
  if (wrong == "dbl") {
    wrong = "inc";
  } else {
    const bool add = wrong.rfind("add", 0) == 0;
    const int arg = wrong.back() - '0';
    if (rng() % 2 == 0) {
      wrong = detail::words({add ? "sub" : "add", digit_word(arg)});
    } else {
      int other = arg;
      while (other == arg) other = detail::uniform(rng, 1, 9);
      wrong = detail::words({add ? "add" : "sub", digit_word(other)});
    }
  }
  task t{{0, "swe", detail::words({"swe", spec_text(s)}), swe_file_text(lines)}, {}};
  add_swe_turn(t, "show", swe_show(lines));
  add_swe_turn(t, detail::words({"@", digit_word(static_cast<int>(line) + 1), "-", lines[line], "+", right}), "ok");
  add_swe_turn(t, "test", "pass");
  add_swe_turn(t, "submit", "");
  return t;
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

// Four rules, a quarter each: the length, the first word, the last word, only allowed
// words.
inline double verify_instruction_following(const cr::prompt& p, const std::vector<std::int32_t>& reply) {
  const auto w = detail::prompt_words(p);  // TOPIC len N start X last Y only W...
  if (w.size() < 9 || w[1] != token_id("len") || !is_digit(w[2]) || reply.empty()) return 0.0;
  const auto n = static_cast<std::size_t>(digit_value(w[2]));
  const std::vector<std::int32_t> allowed(w.begin() + 8, w.end());
  int ok = 0;
  ok += reply.size() == n;
  ok += reply.front() == w[4];
  ok += reply.back() == w[6];
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

// ---- code: what to run -----------------------------------------------------------------
// A program and the outputs its unit tests expect. Verification runs it (the bounded
// interpreter, or python3 in the sandbox: program_verifier.hpp); its score is the
// fraction of tests passed. No job (nullopt) scores 0 without running anything: the
// response does not parse.

struct program_job {
  program code;
  std::array<std::int64_t, std::size(test_inputs)> expected{};
};

inline std::optional<program_job> code_job(const cr::prompt& p, const std::vector<std::int32_t>& reply) {
  std::size_t i = 0;
  const auto spec = parse_spec(detail::prompt_words(p), i);
  if (!spec) return std::nullopt;
  auto code = parse_program(reply);
  if (!code) return std::nullopt;
  return program_job{std::move(*code), expected_outputs(*spec)};
}

inline std::optional<program_job> program_job_of(const cr::prompt& p, const std::vector<std::int32_t>& reply) {
  return code_job(p, reply);
}

inline bool runs_programs(const std::string& domain) { return domain == "code"; }

// The reply of a response (tokens without the end-of-sequence), or nullopt when it was
// truncated or did not end with one (such a response scores 0).
inline std::optional<std::vector<std::int32_t>> reply_of(std::span<const std::int32_t> tokens, bool truncated) {
  if (truncated || tokens.empty() || tokens.back() != eos) return std::nullopt;
  return std::vector<std::int32_t>(tokens.begin(), tokens.end() - 1);
}

// How chat replies are judged: by RLHF's reward model (training), or by the hidden
// preference it was trained from (evaluation).
enum class chat_judge { reward_model, gold };

// The score of one response of an instant domain (not code or SWE).
inline double verify_instant(const cr::prompt& p, const std::vector<std::int32_t>& reply, chat_judge judge,
                             const bt_reward_model* rm) {
  const std::string& d = p.domain;
  if (d == "instruction_following") return verify_instruction_following(p, reply);
  if (d == "mcqa") return verify_mcqa(p, reply);
  if (d == "structured_output") return verify_structured_output(p, reply);
  if (d == "tool_calling") return verify_tool_calling(p, reply);
  if (d == "long_context") return verify_long_context(p, reply);
  if (d == "chat") {
    const int topic = chat_topic(p.text);
    if (judge == chat_judge::gold || rm == nullptr) return gold_chat_score(topic, reply);
    return rm->probability(topic, reply);
  }
  throw std::invalid_argument("demo: no instant verifier for domain '" + d + "'");
}

}  // namespace demo
