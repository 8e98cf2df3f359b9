#pragma once
// Per-run identities (caller root): each scratch directory, and so each run that does
// not share one, gets a uid (and the gid of the same number) of its own from
// sandbox_options::id_range, held until the scratch directory is destroyed. Runs in one
// scratch never overlap, so runs at the same time never share a uid: per-user kernel
// limits (inotify instances, RLIMIT_NPROC, ...) and file ownership are theirs alone.
// The ids are unique within this process; two trainers on one machine are given
// disjoint ranges.

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "cascade_rl/core/error.hpp"

namespace cascade_rl::verify::detail {

struct id_lease_registry {
  std::mutex mutex;
  std::set<std::uint32_t> in_use;
  std::uint64_t cursor = 0;  // where the next search starts, so that ids rotate
};

inline id_lease_registry& id_leases() {
  static id_lease_registry registry;
  return registry;
}

// A free id of [first, first + count), released when the last copy of the result goes.
inline std::shared_ptr<const std::uint32_t> lease_id(std::uint32_t first, std::uint32_t count) {
  id_lease_registry& r = id_leases();
  const std::lock_guard lock(r.mutex);
  for (std::uint64_t k = 0; k < count; ++k) {
    const auto id = static_cast<std::uint32_t>(first + (r.cursor + k) % count);
    if (r.in_use.count(id) != 0) continue;
    r.in_use.insert(id);
    r.cursor = (r.cursor + k + 1) % count;
    return std::shared_ptr<const std::uint32_t>(new std::uint32_t(id), [](const std::uint32_t* p) {
      {
        id_lease_registry& reg = id_leases();
        const std::lock_guard release(reg.mutex);
        reg.in_use.erase(*p);
      }
      delete p;
    });
  }
  cascade_rl::detail::fail("sandbox_options.id_range",
                           "all " + std::to_string(count) + " ids from " + std::to_string(first) +
                               " are held by live scratch directories");
}

}  // namespace cascade_rl::verify::detail
