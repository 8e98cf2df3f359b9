#pragma once
// MOPD teachers, one per domain. A teacher is a policy snapshot, either assigned
// explicitly or captured automatically: after every evaluation the engine offers the
// current policy for each domain, and the registry keeps the best-scoring snapshot seen
// so far (Nemotron-Cascade 2: "the best checkpoint for that domain seen so far"). An
// assigned teacher is never replaced by a capture.
//
// route_teacher_log_probs scores a batch with each prompt's domain teacher.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/rollout_batch.hpp"
#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

enum class teacher_origin { captured, assigned };

template <class Snapshot>
struct teacher_entry {
  // Shared: one capture serves every domain it was best for (and is saved once).
  std::shared_ptr<const Snapshot> snapshot{};
  double score = 0.0;                 // the domain's score when captured (assigned: 0)
  teacher_origin origin = teacher_origin::captured;
  std::string source{};               // "before", a stage name, or "assigned"
  std::uint64_t id = 0;               // identifies the snapshot (shared captures share it)
};

template <class Snapshot>
class teacher_registry {
 public:
  // The teacher of `domain` from now on, whatever was there.
  void assign(const std::string& domain, Snapshot snapshot) {
    entries_[domain] = {std::make_shared<const Snapshot>(std::move(snapshot)), 0.0,
                        teacher_origin::assigned, "assigned", next_id_++};
  }

  // Whether a snapshot scoring `score` on `domain` would become its teacher: the domain
  // has none, or a captured one with a strictly lower score.
  [[nodiscard]] bool would_take(const std::string& domain, double score) const {
    const auto it = entries_.find(domain);
    return it == entries_.end() ||
           (it->second.origin == teacher_origin::captured && score > it->second.score);
  }

  // Offers scores for several domains from one policy state; make() is called at most
  // once, and only if some domain takes it. Returns how many domains took it.
  template <class Make>
  std::size_t offer(const std::vector<std::pair<std::string, double>>& scores,
                    const std::string& source, Make&& make) {
    std::shared_ptr<const Snapshot> shared;
    std::uint64_t id = 0;
    std::size_t taken = 0;
    for (const auto& [domain, score] : scores) {
      if (!would_take(domain, score)) continue;
      if (!shared) {
        shared = std::make_shared<const Snapshot>(make());
        id = next_id_++;
      }
      entries_[domain] = {shared, score, teacher_origin::captured, source, id};
      ++taken;
    }
    return taken;
  }

  [[nodiscard]] bool contains(const std::string& domain) const { return entries_.contains(domain); }
  [[nodiscard]] const teacher_entry<Snapshot>* find(const std::string& domain) const {
    const auto it = entries_.find(domain);
    return it == entries_.end() ? nullptr : &it->second;
  }
  [[nodiscard]] const std::map<std::string, teacher_entry<Snapshot>>& entries() const {
    return entries_;
  }
  [[nodiscard]] std::vector<std::string> domains() const {
    std::vector<std::string> out;
    for (const auto& [domain, entry] : entries_) out.push_back(domain);
    return out;
  }
  [[nodiscard]] bool empty() const { return entries_.empty(); }

  // For checkpoint loading: an entry as it was saved.
  void put(const std::string& domain, teacher_entry<Snapshot> entry) {
    if (entry.id >= next_id_) next_id_ = entry.id + 1;
    entries_[domain] = std::move(entry);
  }
  [[nodiscard]] std::uint64_t next_id() const { return next_id_; }
  void set_next_id(std::uint64_t id) { next_id_ = id; }

 private:
  std::map<std::string, teacher_entry<Snapshot>> entries_;
  std::uint64_t next_id_ = 1;
};

namespace detail {

inline std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

}  // namespace detail

// out[t] = log pi_teacher(token t) with the teacher of t's prompt domain. Every prompt's
// domain is checked before any teacher runs: an unknown one is an error naming the
// domain and the prompt index. Each teacher scores the sub-batch of its domain.
template <Teacher Snapshot>
void route_teacher_log_probs(const teacher_registry<Snapshot>& teachers, const rollout_batch& batch,
                             std::span<float> out) {
  detail::require_size(out.size(), batch.token_count(), "teacher_log_probs", "one per token");
  std::vector<std::string> domains;  // in order of first appearance
  for (std::size_t g = 0; g < batch.prompt_count(); ++g) {
    const std::string& d = batch.prompts[g].domain;
    if (!teachers.contains(d))
      detail::fail_at("prompts", g, "has domain '" + d + "', which has no MOPD teacher (teachers: " +
                                        detail::joined(teachers.domains()) + ")");
    if (std::find(domains.begin(), domains.end(), d) == domains.end()) domains.push_back(d);
  }
  for (const std::string& d : domains) {
    const Snapshot& teacher = *teachers.find(d)->snapshot;
    if (domains.size() == 1) {
      teacher.log_probs(batch, out);
      return;
    }
    std::vector<std::uint8_t> keep(batch.prompt_count());
    for (std::size_t g = 0; g < keep.size(); ++g) keep[g] = batch.prompts[g].domain == d ? 1 : 0;
    const rollout_batch part = subset_groups(batch, keep);
    std::vector<float> scored(part.token_count());
    teacher.log_probs(part, std::span<float>(scored));
    // Scatter back: the part holds this domain's groups in batch order.
    std::size_t from = 0;
    for (std::size_t g = 0; g < batch.prompt_count(); ++g) {
      if (keep[g] == 0) continue;
      const auto first = static_cast<std::size_t>(batch.token_offsets[static_cast<std::size_t>(batch.group_offsets[g])]);
      const auto last = static_cast<std::size_t>(batch.token_offsets[static_cast<std::size_t>(batch.group_offsets[g + 1])]);
      for (std::size_t t = first; t < last; ++t) out[t] = scored[from++];
    }
  }
}

}  // namespace cascade_rl
