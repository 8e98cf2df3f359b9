#pragma once
// The tiny language of the code and SWE tasks, and its bounded interpreter. A program
// transforms one integer accumulator, which starts at the input x:
//   inc | dec | dbl            x+1, x-1, 2x
//   add D | sub D              x+D, x-D (D a digit)
//   rep D ... end              the body D times
//   wnz ... end                the body while x != 0 (may never stop)
// Every executed instruction and every loop test costs one step; a run that would pass
// max_steps stops with status step_limit, so a generated `wnz inc end` cannot hang the
// reward workers. |x| beyond one million stops with status overflow.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "vocabulary.hpp"

namespace demo {

struct instruction {
  enum class op { inc, dec, dbl, add, sub, rep, wnz } code = op::inc;
  int argument = 0;
  std::vector<instruction> body{};  // rep, wnz
};
using program = std::vector<instruction>;

namespace detail {

inline bool parse_block(std::span<const std::int32_t> t, std::size_t& i, bool nested, program& out) {
  static const std::int32_t inc = token_id("inc"), dec = token_id("dec"), dbl = token_id("dbl"),
                            add = token_id("add"), sub = token_id("sub"), rep = token_id("rep"),
                            wnz = token_id("wnz"), end = token_id("end");
  while (i < t.size()) {
    const std::int32_t w = t[i++];
    instruction ins;
    if (w == end) return nested;
    if (w == inc) ins.code = instruction::op::inc;
    else if (w == dec) ins.code = instruction::op::dec;
    else if (w == dbl) ins.code = instruction::op::dbl;
    else if (w == add || w == sub || w == rep) {
      ins.code = w == add ? instruction::op::add : w == sub ? instruction::op::sub : instruction::op::rep;
      if (i == t.size() || !is_digit(t[i])) return false;
      ins.argument = digit_value(t[i++]);
      if (w == rep && !parse_block(t, i, true, ins.body)) return false;
    } else if (w == wnz) {
      ins.code = instruction::op::wnz;
      if (!parse_block(t, i, true, ins.body)) return false;
    } else {
      return false;
    }
    out.push_back(std::move(ins));
  }
  return !nested;  // a block left open
}

}  // namespace detail

// The program spelled by `tokens` (a trailing end-of-sequence is ignored), or nullopt
// when it does not parse.
inline std::optional<program> parse_program(std::span<const std::int32_t> tokens) {
  if (!tokens.empty() && tokens.back() == eos) tokens = tokens.first(tokens.size() - 1);
  program p;
  std::size_t i = 0;
  if (!detail::parse_block(tokens, i, false, p)) return std::nullopt;
  return p;
}

struct run_result {
  enum class status { ok, step_limit, overflow } state = status::ok;
  std::int64_t value = 0;
  std::size_t steps = 0;
  [[nodiscard]] bool ok() const { return state == status::ok; }
};

namespace detail {

inline bool run_block(const program& p, run_result& r, std::size_t max_steps) {
  for (const instruction& ins : p) {
    if (++r.steps > max_steps) {
      r.state = run_result::status::step_limit;
      return false;
    }
    switch (ins.code) {
      case instruction::op::inc: ++r.value; break;
      case instruction::op::dec: --r.value; break;
      case instruction::op::dbl: r.value *= 2; break;
      case instruction::op::add: r.value += ins.argument; break;
      case instruction::op::sub: r.value -= ins.argument; break;
      case instruction::op::rep:
        for (int k = 0; k < ins.argument; ++k)
          if (!run_block(ins.body, r, max_steps)) return false;
        break;
      case instruction::op::wnz:
        while (r.value != 0) {
          if (++r.steps > max_steps) {
            r.state = run_result::status::step_limit;
            return false;
          }
          if (!run_block(ins.body, r, max_steps)) return false;
        }
        break;
    }
    if (r.value > 1'000'000 || r.value < -1'000'000) {
      r.state = run_result::status::overflow;
      return false;
    }
  }
  return true;
}

}  // namespace detail

inline run_result run_program(const program& p, std::int64_t x, std::size_t max_steps = 200) {
  run_result r;
  r.value = x;
  detail::run_block(p, r, max_steps);
  return r;
}

// The unit tests of a specification f(x) = a*x + b: the inputs it is checked on.
inline constexpr std::int64_t test_inputs[] = {0, 1, 2, 3, 5};

// How many of the unit tests the program passes: test k runs it on test_inputs[k] and
// expects expected[k] (a run that hits the step bound or overflows fails its test).
inline int tests_passed(const program& p, std::span<const std::int64_t> expected, std::size_t max_steps = 200) {
  int passed = 0;
  for (std::size_t k = 0; k < std::size(test_inputs) && k < expected.size(); ++k) {
    const run_result r = run_program(p, test_inputs[k], max_steps);
    passed += r.ok() && r.value == expected[k];
  }
  return passed;
}

// Fraction of the tests of f(x) = a*x + b that the program passes (0 if it does not
// parse; a run that hits the step bound or overflows fails its test).
inline double pass_rate(std::span<const std::int32_t> tokens, int a, int b, std::size_t max_steps = 200) {
  const auto p = parse_program(tokens);
  if (!p) return 0.0;
  int passed = 0;
  for (std::int64_t x : test_inputs) {
    const run_result r = run_program(*p, x, max_steps);
    passed += r.ok() && r.value == a * x + b;
  }
  return static_cast<double>(passed) / static_cast<double>(std::size(test_inputs));
}

}  // namespace demo
