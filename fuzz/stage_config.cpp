// Schedule parsing (stage_config_json.hpp): arbitrary bytes as a JSON schedule. Parsing
// must succeed or refuse with cascade_rl::error; nothing else may escape. When it
// succeeds, the round trip must hold: writing the schedule and parsing the text again
// gives an equal schedule, and writing that gives the same text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cascade_rl/cascade.hpp"

namespace cr = cascade_rl;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<cr::stage_config> parsed;
  try {
    parsed = cr::parse_schedule(text);
  } catch (const cr::error&) {
    return 0;  // a documented refusal
  }
  // A parsed schedule is valid, so everything below must succeed: an error here is a bug.
  const std::string written = cr::schedule_to_string(parsed);
  const std::vector<cr::stage_config> reparsed = cr::parse_schedule(written);
  const std::string difference = cr::schedule_difference(parsed, reparsed);
  if (!difference.empty()) {
    std::fprintf(stderr, "round trip changed %s\n", difference.c_str());
    std::abort();
  }
  if (cr::schedule_to_string(reparsed) != written) {
    std::fprintf(stderr, "writing the re-parsed schedule gave other text\n");
    std::abort();
  }
  return 0;
}
