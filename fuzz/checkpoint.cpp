// Checkpoint parsing: an arbitrary state.json (sealed with valid checksums, so the
// parser is reached) and an arbitrary `latest`, resumed into the test cascade. resume()
// must succeed or refuse with cascade_rl::error; nothing else may escape.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "cascade_rl/cascade.hpp"
#include "support/test_cascade.hpp"
#include "support/test_policy.hpp"

namespace cr = cascade_rl;
namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path dir = fs::temp_directory_path() / ("cascade_rl_fuzz_ckpt_" + std::to_string(::getpid()));
  static const std::string policy_bytes = [] {
    fs::remove_all(dir);
    auto cascade = cr::testing::make_test_cascade();
    cr::testing::tabular_policy policy;
    auto runner = cr::make_runner(cascade, policy, {.seed = 1, .checkpoint_dir = dir, .max_steps = 3});
    runner.run();
    return std::string();
  }();
  (void)policy_bytes;
  std::string name;
  {
    std::ifstream latest(dir / "latest");
    latest >> name;
  }
  const std::string text(reinterpret_cast<const char*>(data), size);
  const fs::path ckpt = dir / name;
  const std::string saved = cr::detail::read_text_file(ckpt / "state.json");
  std::ofstream(ckpt / "state.json", std::ios::trunc | std::ios::binary) << text;
  try {
    cr::detail::seal_checkpoint(ckpt);
  } catch (const cr::error&) {  // not JSON, or names no policy: checksum it without them
  }
  try {
    auto cascade = cr::testing::make_test_cascade();
    cr::testing::tabular_policy policy;
    auto runner = cr::make_runner(cascade, policy, {.seed = 1, .checkpoint_dir = dir});
    runner.resume();
  } catch (const cr::error&) {
  }
  std::ofstream(ckpt / "state.json", std::ios::trunc | std::ios::binary) << saved;
  cr::detail::seal_checkpoint(ckpt);
  return 0;
}
