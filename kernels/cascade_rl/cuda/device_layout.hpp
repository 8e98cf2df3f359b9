#pragma once
// Views of layouts whose arrays live in device memory (or, for the portable Thrust
// path on the CPP/OMP systems, in host memory). They mirror token_layout and
// group_layout of the host core, but cannot validate their arrays on construction
// (that would read device memory): the kernels report bad offsets and values through
// device_report, and the convenience layer turns the report into cascade_rl::error.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cascade_rl/core/host_device.hpp"
#include "cascade_rl/core/uniform_groups.hpp"

// Code that reports into a device_report with atomics: nvcc's device pass, or the CPU
// emulator of the tests (tests/cuda/emulator), which runs the kernels as host code.
#if defined(__CUDA_ARCH__) || defined(CASCADE_RL_CUDA_EMULATOR)
#define CASCADE_RL_DEVICE_REPORTS 1
#endif

namespace cascade_rl::cuda {

// Ragged tokens: sequence i owns [offsets[i], offsets[i+1]); mask is null or one byte
// per token (non-zero keeps the token). `tokens` must equal offsets[sequences].
struct device_token_layout {
  const std::int64_t* offsets = nullptr;
  const std::uint8_t* mask = nullptr;
  std::size_t sequences = 0;
  std::size_t tokens = 0;

  CASCADE_RL_HD std::size_t begin(std::size_t s) const { return static_cast<std::size_t>(offsets[s]); }
  CASCADE_RL_HD std::size_t end(std::size_t s) const { return static_cast<std::size_t>(offsets[s + 1]); }
  CASCADE_RL_HD bool valid(std::size_t t) const { return mask == nullptr || mask[t] != 0; }
};

// Groups of contiguous sequences: uniform (offsets null, group_size each) or group g
// owning [offsets[g], offsets[g+1]). max_group_size is a hint for variable groups (0:
// unknown) that picks the kernel: up to 32 a part of a warp per group, up to 1024 a
// warp, beyond a block.
struct device_group_layout {
  const std::int64_t* offsets = nullptr;
  std::size_t groups = 0;
  std::size_t group_size = 0;
  std::size_t sequences = 0;
  std::size_t max_group_size = 0;

  // shape.groups groups of shape.size sequences each (host code: a size of 0 throws).
  [[nodiscard]] static device_group_layout uniform(const uniform_groups& shape) {
    cascade_rl::detail::require_valid(shape);
    return {nullptr, shape.groups, shape.size, shape.groups * shape.size, shape.size};
  }
  // Host code: throws naming `argument` unless count is one per sequence (as
  // group_layout::require_sequences).
  void require_sequences(std::size_t count, std::string_view argument) const {
    cascade_rl::detail::require_one_per_sequence(count, sequences, argument);
  }
  // offsets: group_count + 1 entries in device memory, offsets[group_count] == sequences.
  [[nodiscard]] static device_group_layout variable(const std::int64_t* offsets,
                                                    std::size_t group_count, std::size_t sequences,
                                                    std::size_t max_group_size = 0) {
    return {offsets, group_count, 0, sequences, max_group_size};
  }

  CASCADE_RL_HD std::size_t begin(std::size_t g) const {
    return offsets == nullptr ? g * group_size : static_cast<std::size_t>(offsets[g]);
  }
  CASCADE_RL_HD std::size_t end(std::size_t g) const {
    return offsets == nullptr ? (g + 1) * group_size : static_cast<std::size_t>(offsets[g + 1]);
  }
};

// What a kernel found wrong, as the smallest offending index per kind (all ones: none).
// Written with integer atomicMin, so it is the same on every run. Lives at the start of
// a function's temporary storage; the convenience layer reads it back.
struct device_report {
  static constexpr unsigned long long none = ~0ull;
  // first_nonfinite[k]: first token or sequence where input argument k (in the order the
  // host core validates them) is NaN or infinite on a valid element, as the entry
  // 2 * index + (1 if infinite, 0 if NaN): the smallest entry is the first index and
  // still says which it was, so the message can be the host core's. Five slots: the PPO
  // clip's inputs, the most any term reads.
  static constexpr std::size_t nonfinite_arguments = 5;
  unsigned long long first_nonfinite[nonfinite_arguments];
  unsigned long long first_singleton;  // first group of one where the rule refuses it
  unsigned long long first_bad_offset; // first group/sequence whose offsets are not increasing
  unsigned long long first_bad_label;  // log-probs: first row whose label is outside [0, V)
  // A refusal of one algorithm's own, named by its convenience layer:
  // place_on_last_valid_token the first sequence with no valid token, gather_sequences
  // the first k whose index is past the end of the input, the whitening of REINFORCE++
  // the valid-token count when the unbiased variance cannot use it (1).
  unsigned long long first_refused;

  CASCADE_RL_HD static constexpr unsigned long long nonfinite_entry(std::size_t index, bool infinite) {
    return 2ull * index + (infinite ? 1ull : 0ull);
  }
  static constexpr std::size_t nonfinite_index(unsigned long long entry) { return entry / 2; }
  static constexpr bool nonfinite_is_infinite(unsigned long long entry) { return entry % 2 == 1; }
};

// The device_report at the start of a call's temporary storage.
inline device_report* report_of(void* d_temp_storage) {
  return static_cast<device_report*>(d_temp_storage);
}

}  // namespace cascade_rl::cuda
