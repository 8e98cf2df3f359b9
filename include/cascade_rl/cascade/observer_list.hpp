#pragma once
// A list of observers chosen at run time, itself one observer type.
//
// runner::run takes its observers as a template parameter pack, so every different set
// of observers instantiates the whole run loop again (with the stages' step code it
// calls). A program that runs one cascade with different observers (a console run, a
// study with probes, a test recording a trace) can instead pass one observer_list: the
// run is instantiated once, and may be compiled once, in a library of its own, for all
// of its callers. Each event is delivered to the listed observers in the order they were
// added, to those that have the member for it (observers.hpp), as with a pack.
//
// add(o) with an lvalue keeps a reference (the observer must outlive the run); with an
// rvalue it keeps the observer itself. Copies of a list share the observers it keeps.

#include <cstddef>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "cascade_rl/cascade/observers.hpp"

namespace cascade_rl {

class observer_list {
 public:
  observer_list() = default;

  // The list of these observers, in this order (as add, one by one).
  template <class... O>
    requires(sizeof...(O) > 0 && (!std::is_same_v<std::remove_cvref_t<O>, observer_list> && ...))
  explicit observer_list(O&&... observers) {
    (add(std::forward<O>(observers)), ...);
  }

  // Appends an observer: an lvalue by reference, an rvalue by value. Adding a list
  // appends its observers (a list is never nested in itself).
  template <class O>
  observer_list& add(O&& observer) {
    using T = std::remove_reference_t<O>;
    if constexpr (std::is_same_v<std::remove_cv_t<T>, observer_list>) {
      const std::vector<entry> theirs = observer.entries_;  // a copy: the list may be this one
      entries_.insert(entries_.end(), theirs.begin(), theirs.end());
    } else if constexpr (std::is_lvalue_reference_v<O>) {
      entries_.push_back(entry{const_cast<std::remove_cv_t<T>*>(&observer), &table_of<T>, nullptr});
    } else {
      auto owned = std::make_shared<std::remove_cv_t<T>>(std::forward<O>(observer));
      entries_.push_back(entry{owned.get(), &table_of<T>, owned});
    }
    return *this;
  }

  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  [[nodiscard]] bool empty() const noexcept { return entries_.empty(); }

  // The observer members (observers.hpp), each passing the event on.
  void on_warning(std::string_view text) const { deliver(warning_event{text}); }
  void on_stage_begin(const stage_config& config, std::size_t stage_index) const {
    deliver(stage_begin_event{config, stage_index});
  }
  void on_step(const step_metrics& metrics) const { deliver(step_event{metrics}); }
  void on_evaluation(const evaluation_record& record) const { deliver(evaluation_event{record}); }
  void on_stage_end(const stage_config& config, const forgetting_matrix& forgetting) const {
    deliver(stage_end_event{config, forgetting});
  }

 private:
  // One function per event for an observer type T (const T when added as const: then
  // only its const members are called, as a pack of const references would).
  struct table {
    void (*warning)(void*, const warning_event&);
    void (*stage_begin)(void*, const stage_begin_event&);
    void (*step)(void*, const step_event&);
    void (*evaluation)(void*, const evaluation_event&);
    void (*stage_end)(void*, const stage_end_event&);
  };
  template <class T>
  static void deliver_to(void* observer, const auto& event) {
    detail::deliver(*static_cast<T*>(observer), event);
  }
  template <class T>
  static constexpr table table_of{&deliver_to<T>, &deliver_to<T>, &deliver_to<T>, &deliver_to<T>,
                                  &deliver_to<T>};

  struct entry {
    void* observer;
    const table* functions;
    std::shared_ptr<void> owned;  // null for an observer held by reference
  };

  template <class Event>
  void deliver(const Event& event) const {
    for (const entry& e : entries_) function_for(*e.functions, event)(e.observer, event);
  }
  static auto function_for(const table& t, const warning_event&) { return t.warning; }
  static auto function_for(const table& t, const stage_begin_event&) { return t.stage_begin; }
  static auto function_for(const table& t, const step_event&) { return t.step; }
  static auto function_for(const table& t, const evaluation_event&) { return t.evaluation; }
  static auto function_for(const table& t, const stage_end_event&) { return t.stage_end; }

  std::vector<entry> entries_;
};

}  // namespace cascade_rl
