#pragma once
// The forgetting matrix: per-domain scores before the first stage (row 0, "before") and
// after each stage (row k). From it:
//   backward transfer of domain d: R[last][d] - R[k_d][d], where k_d is the row of the
//     last stage that trained d (its config.domains lists d); a negative value is
//     forgetting. Undefined for a domain no stage trained.
//   overall backward transfer: the mean over domains whose last training stage is not
//     the final row (as in Lopez-Paz & Ranzato 2017, GEM, the last task is excluded:
//     nothing came after it).
//   regressions: every (stage, domain) whose score fell by more than a threshold from
//     the row before (which domain fell, after which stage).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/core/checks.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

struct regression {
  std::string domain{};
  std::string stage{};    // the stage after which the domain fell
  std::size_t row = 0;    // that stage's row (1-based stage position)
  double before = 0.0;
  double after = 0.0;
  [[nodiscard]] double drop() const { return before - after; }
};

class forgetting_matrix {
 public:
  forgetting_matrix() = default;
  explicit forgetting_matrix(std::vector<std::string> domains) : domains_(std::move(domains)) {}

  // Appends a row: `label` ("before" or the stage name), the domains that stage trained,
  // and one score per domain (in domains() order).
  void add_row(std::string label, std::vector<std::string> trained, std::vector<double> scores) {
    detail::require_size(scores.size(), domains_.size(), "forgetting_matrix row scores",
                         "one per domain");
    rows_.push_back({std::move(label), std::move(trained), std::move(scores)});
  }

  // Same domains, same rows (labels, trained domains, scores compared with ==).
  friend bool operator==(const forgetting_matrix&, const forgetting_matrix&) = default;

  [[nodiscard]] const std::vector<std::string>& domains() const { return domains_; }
  [[nodiscard]] std::size_t rows() const { return rows_.size(); }
  [[nodiscard]] const std::string& label(std::size_t row) const { return rows_.at(row).label; }
  [[nodiscard]] double score(std::size_t row, std::size_t column) const {
    return rows_.at(row).scores.at(column);
  }
  [[nodiscard]] double score(std::size_t row, const std::string& domain) const {
    return score(row, column(domain));
  }
  [[nodiscard]] std::size_t column(const std::string& domain) const {
    for (std::size_t c = 0; c < domains_.size(); ++c)
      if (domains_[c] == domain) return c;
    detail::fail("domain", "'" + domain + "' is not a column of the forgetting matrix");
  }

  // The row of the last stage that trained `domain`, if any.
  [[nodiscard]] std::optional<std::size_t> last_trained_row(const std::string& domain) const {
    std::optional<std::size_t> last;
    for (std::size_t r = 1; r < rows_.size(); ++r)
      for (const auto& d : rows_[r].trained)
        if (d == domain) last = r;
    return last;
  }

  [[nodiscard]] std::optional<double> backward_transfer(const std::string& domain) const {
    const auto k = last_trained_row(domain);
    if (!k) return std::nullopt;
    const std::size_t c = column(domain);
    return score(rows_.size() - 1, c) - score(*k, c);
  }

  [[nodiscard]] std::optional<double> backward_transfer() const {
    double sum = 0.0;
    std::size_t count = 0;
    for (const auto& d : domains_) {
      const auto k = last_trained_row(d);
      if (!k || *k + 1 == rows_.size()) continue;
      sum += *backward_transfer(d);
      ++count;
    }
    if (count == 0) return std::nullopt;
    return sum / static_cast<double>(count);
  }

  [[nodiscard]] std::vector<regression> regressions(double threshold) const {
    std::vector<regression> out;
    for (std::size_t r = 1; r < rows_.size(); ++r)
      for (std::size_t c = 0; c < domains_.size(); ++c) {
        const double before = rows_[r - 1].scores[c];
        const double after = rows_[r].scores[c];
        if (before - after > threshold) out.push_back({domains_[c], rows_[r].label, r, before, after});
      }
    return out;
  }

  // The table as text: a column per domain, a row per evaluation, then backward transfer.
  void print(std::ostream& out) const {
    char cell[64];
    out << "forgetting matrix (rows: after stage; columns: domain)\n";
    std::size_t width = 8;
    for (const auto& row : rows_) width = std::max(width, row.label.size() + 2);
    out << std::string(width, ' ');
    for (const auto& d : domains_) {
      std::snprintf(cell, sizeof cell, "%12s", d.substr(0, 11).c_str());
      out << cell;
    }
    out << '\n';
    for (const auto& row : rows_) {
      out << row.label << std::string(width - row.label.size(), ' ');
      for (double s : row.scores) {
        std::snprintf(cell, sizeof cell, "%12.4f", s);
        out << cell;
      }
      out << '\n';
    }
    out << "BWT" << std::string(width - 3, ' ');
    for (const auto& d : domains_) {
      const auto b = backward_transfer(d);
      if (b)
        std::snprintf(cell, sizeof cell, "%+12.4f", *b);
      else
        std::snprintf(cell, sizeof cell, "%12s", "-");
      out << cell;
    }
    const auto overall = backward_transfer();
    out << "   overall " << (overall ? std::to_string(*overall) : std::string("-")) << '\n';
  }

  [[nodiscard]] nlohmann::json to_json() const {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : rows_)
      rows.push_back({{"label", row.label}, {"trained", row.trained}, {"scores", row.scores}});
    return {{"domains", domains_}, {"rows", rows}};
  }

  // Throws cascade_rl::error on a malformed value.
  [[nodiscard]] static forgetting_matrix from_json(const nlohmann::json& j) {
    try {
      forgetting_matrix m(j.at("domains").get<std::vector<std::string>>());
      for (const auto& row : j.at("rows"))
        m.add_row(row.at("label").get<std::string>(), row.at("trained").get<std::vector<std::string>>(),
                  row.at("scores").get<std::vector<double>>());
      return m;
    } catch (const nlohmann::json::exception& e) {
      detail::fail("forgetting matrix", std::string("is malformed: ") + e.what());
    }
  }

 private:
  struct row_t {
    std::string label;
    std::vector<std::string> trained;
    std::vector<double> scores;
    friend bool operator==(const row_t&, const row_t&) = default;
  };
  std::vector<std::string> domains_;
  std::vector<row_t> rows_;
};

}  // namespace cascade_rl
